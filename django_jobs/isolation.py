"""Running one suspect attempt in a child process of its own.

A job whose previous attempt was ``lost`` may be what killed its worker (a
segfaulting C extension, the OOM killer, a task that calls ``os._exit``). Run
in the worker's own process, it would take every other running job down with
it again — and their attempts would be lost too. So a suspect runs in a fresh
(spawned, not forked: a fork would copy other threads' database sockets)
child process. If the child dies, only that attempt is lost, and the worker,
still alive, records exactly that.

This module imports no models at the top: the child imports it before Django
is set up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .values import Claimed, Report
    from .worker import WorkerConfig


def _child(
    config: dict[str, Any], worker_id: Any, claimed: dict[str, Any], pipe: Connection
) -> None:
    import django

    django.setup()
    from django.db import connections

    from . import registry
    from .attempt import AttemptControl
    from .exceptions import JobStopped
    from .values import Claimed
    from .worker import Running, Worker, WorkerConfig

    worker = Worker(WorkerConfig(**config), worker_id)
    registry.discover(worker.settings.TASK_MODULES)
    attempt = Claimed(**claimed)
    item = Running(attempt, AttemptControl(attempt.timeout))
    try:
        report = worker._run_task(item)
    except JobStopped as exc:
        report = worker._stopped_report(item, exc)
    pipe.send(report)
    pipe.close()
    connections.close_all()


def run_isolated(
    config: WorkerConfig, worker_id: Any, claimed: Claimed, on_start: Any
) -> Report | int:
    """Run the attempt in a child; return its report, or the child's exit code if it died."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(
        target=_child,
        # Plain data only: unpickling our classes would import models before setup.
        args=(dataclasses.asdict(config), worker_id, dataclasses.asdict(claimed), sender),
        name=f"django-jobs-isolated-{claimed.job_id}",
        daemon=True,
    )
    process.start()
    sender.close()
    on_start(process)
    report: Report | None = None
    with contextlib.suppress(EOFError):  # EOF: the child died without a word
        report = receiver.recv()
    process.join()
    if report is not None:
        return report
    return process.exitcode if process.exitcode is not None else -1
