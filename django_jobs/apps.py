from django.apps import AppConfig


class DjangoJobsConfig(AppConfig):
    name = "django_jobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core import checks

        from . import api_checks  # noqa: F401 - registers the API's system checks
        from .supported import check_backport_installed

        checks.register(check_backport_installed)
