#!/usr/bin/env python
"""manage.py of the smallest project that mounts django_jobs's admin and API.

The packaging tests run it with the Python of a fresh virtualenv that has only
the built wheel (or sdist) installed, no extras: what a user's project gets.
"""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "minimal_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
