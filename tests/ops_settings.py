"""tests.settings, plus the backends the operations tests run subprocesses with.

Kept out of tests.settings so the suite's own list of aliases does not change:
only worker and CLI subprocesses started with ``--settings tests.ops_settings``
see them. They share the test databases and queues with ``default``.
"""

from __future__ import annotations

from typing import Any

from tests.settings import *  # noqa: F403
from tests.settings import TASKS

_QUICK: dict[str, Any] = {
    "POLL_SECONDS": 0.2,
    "BACKOFF_BASE_SECONDS": 0.05,
    "BACKOFF_CAP_SECONDS": 0.5,
}


def _backend(**options: Any) -> dict[str, Any]:
    return {
        "BACKEND": "django_jobs.backend.JobsBackend",
        "QUEUES": ["default", "other"],
        "OPTIONS": {**_QUICK, **options},
    }


TASKS = {
    **TASKS,
    # A worker of the next deploy: it has the tasks of tests.deploy_tasks.
    "upgraded": _backend(TASK_MODULES=["tests.deploy_tasks"]),
    # A worker that gives a task it does not have one second from enqueue.
    "impatient": _backend(UNKNOWN_TASK_GRACE=1.0),
    # Heartbeats every 0.5s, stale after 2s: health checks see a death in seconds.
    "watched": _backend(
        LEASE_SECONDS=2.0,
        HEARTBEAT_SECONDS=0.5,
        REAP_SECONDS=0.5,
        SHUTDOWN_GRACE_SECONDS=1.0,
        WORKER_STALE_SECONDS=2.0,
    ),
    # Vacuums a table after a few hundred dead rows, not 100,000.
    "vacuuming": _backend(VACUUM_DEAD_ROWS=500, REAP_SECONDS=0.5),
}
