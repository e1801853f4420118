from django.tasks import task

from benchmarks.benchapp.latency import probe

__all__ = ["noop", "probe"]


@task
def noop() -> None:
    """The job every benchmark runs: the cost measured is the queue's own."""
