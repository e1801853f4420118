#!/usr/bin/env python
"""Django's command-line utility for the example project.

Works from anywhere: ``python example_project/manage.py ...`` from the repository
root, or ``python manage.py ...`` from this directory.
"""

import os
import sys
from pathlib import Path


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
