from django.tasks import task


@task
def noop() -> None:
    """The job every benchmark runs: the cost measured is the queue's own."""
