"""Import every module of the installed django_jobs, and say which ones fail and why.

Run by the packaging tests with the Python of a fresh virtualenv that has only
the built wheel (or sdist) installed, no extras: a module that imports a
package django-jobs does not declare (a dev or test tool) fails here with the
module's name and the missing package's, as it would for every user.
"""

import importlib
import os
import pkgutil
import sys

import django


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "minimal_project.settings")
    django.setup()
    import django_jobs

    failures: list[str] = []

    def failed(name: str) -> None:
        error = sys.exc_info()[1]
        failures.append(f"{name}: {type(error).__name__}: {error}")

    names = ["django_jobs"]
    for module in pkgutil.walk_packages(django_jobs.__path__, "django_jobs.", onerror=failed):
        names.append(module.name)
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # every failure is reported, not just the first
            failed(name)

    where = django_jobs.__path__[0]
    print(f"imported {len(names) - len(failures)} of {len(names)} modules from {where}")
    for failure in failures:
        print(f"FAILED {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
