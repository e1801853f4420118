import os

from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "tests.testapp"

    def ready(self) -> None:
        # tests/test_worker.py: a worker process started with this set records its task signals.
        if path := os.environ.get("DJANGO_JOBS_TEST_RECEIVERS"):
            from tests.receiver_file import connect

            connect(path)
