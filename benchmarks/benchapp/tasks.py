import time

from benchmarks.benchapp.latency import probe
from django_jobs.framework import task

__all__ = ["naps", "noop", "probe"]


@task
def noop() -> None:
    """The job every benchmark runs: the cost measured is the queue's own."""


@task
def naps(seconds: float) -> None:
    """A job that waits on I/O for ``seconds`` (benchmarks.drain --sleep)."""
    time.sleep(seconds)
