from benchmarks.benchapp.latency import probe
from django_jobs.framework import task

__all__ = ["noop", "probe"]


@task
def noop() -> None:
    """The job every benchmark runs: the cost measured is the queue's own."""
