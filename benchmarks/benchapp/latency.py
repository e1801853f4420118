"""The W3 probe for django-jobs (and the other ``django.tasks`` backends): note the start.

Django's ``@task`` from ``django_jobs.framework``: ``django.tasks`` on Django 6, the
backport on 5.2, where the test suite runs the benchmarks at a tiny size too.
"""

from benchmarks.record import record_start
from django_jobs.framework import task


@task
def probe(number: int) -> None:
    record_start(number)
