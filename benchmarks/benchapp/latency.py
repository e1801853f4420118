"""The W3 probe for django-jobs (and the other ``django.tasks`` backends): note the start."""

from django.tasks import task

from benchmarks.record import record_start


@task
def probe(number: int) -> None:
    record_start(number)
