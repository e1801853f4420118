"""Task versions: which workers may run a job, by the version of the code that enqueued it.

``@task(version="2")`` stamps each job with its enqueuer's version of the task
(``Job.task_version``). A worker runs a job when its own version of the task is
that one or a later one: a job enqueued by older code runs on newer workers
(keep a task able to take its older versions' arguments), and a job enqueued
by newer code waits for a worker of that release, as a job whose task a worker
lacks does during a rolling deploy (``worker/runner.py``). Raise the version
when workers of the old release must not run the new jobs: new arguments, or
a new meaning of the old ones.

Versions are whole numbers separated by dots, compared part by part: "1.10"
comes after "1.9", "2" and "2.0" are equal, and no version (``""``) comes
before every other.
"""

from __future__ import annotations

import re

_FORM = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9})*")


def problem(version: str) -> str | None:
    """Why ``version`` is not a version (None if it is), for ``@task`` to refuse it."""
    if version == "" or _FORM.fullmatch(version):
        return None
    return (
        "version must be whole numbers separated by dots, such as '2' or '1.4' "
        f"('' for none), not {version!r}."
    )


def order(version: str) -> tuple[int, ...]:
    """Where ``version`` stands among versions.

    A stored label that is not a version (rows written before versions were
    compared) stands as no version, so any worker runs its job, as then.
    """
    if not _FORM.fullmatch(version):
        return ()
    parts = [int(part) for part in version.split(".")]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def runs(worker: str, job: str) -> bool:
    """Whether a worker whose task is at version ``worker`` may run a job of version ``job``.

    Asked for every job a worker runs; most are unversioned or of the
    worker's own version, and those are answered without parsing either.
    """
    return job == worker or not job or order(worker) >= order(job)
