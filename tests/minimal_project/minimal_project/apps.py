from django.apps import AppConfig


class MinimalConfig(AppConfig):
    name = "minimal_project"

    def ready(self) -> None:
        # Like an app whose signal receivers enqueue: its tasks (and so
        # django.tasks, whose import registers the Tasks checks) load at start-up.
        from . import tasks  # noqa: F401
