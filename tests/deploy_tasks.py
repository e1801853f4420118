"""A task of "the next deploy": the test process has it, workers of ``default`` do not.

No app's ``tasks`` module imports this, so a worker registers it only when its
backend lists it in ``TASK_MODULES`` (the ``upgraded`` backend of
tests.ops_settings) — as a worker still running the previous release would not.
"""

from __future__ import annotations

from django_jobs import task


@task(max_attempts=2)
def shipped_later(value: int) -> int:
    return value * 2


@task(version="2")
def reworked(value: int) -> int:
    """Version 2 of a task whose earlier versions' jobs it still runs."""
    return value + 1
