"""Running one suspect attempt in a child process of its own.

A job whose previous attempt was ``lost`` may be what killed its worker (a
segfaulting C extension, the OOM killer, a task that calls ``os._exit``). Run
in the worker's own process, it would take every other running job down with
it again — and their attempts would be lost too. So a suspect runs in a fresh
(spawned, not forked: a fork would copy other threads' database sockets)
child process. If the child dies, only that attempt is lost, and the worker,
still alive, records exactly that.

The child imports this module before Django is set up, so it imports no
models at the top; that is also why it is not inside ``django_jobs.worker``,
whose package imports the whole worker. The child runs the attempt with the
same ``TaskRunner`` as a job thread and sends its ``Report`` back.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import multiprocessing
import os
import signal
import sys
import uuid
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .values import Claimed, Report


# prctl(2)'s option: the signal this process gets when the thread that made it ends.
_PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> None:
    """End this child when the worker that started it ends, however it ends (Linux).

    A daemon child is ended only by a Python exit of its parent. A worker that
    ends otherwise (``os._exit`` at shutdown, SIGKILL, the OOM killer) left
    the child running its task after the job was released, and the job ran
    a second time elsewhere while this one still did.
    """
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the worker ended before the line above took effect
        os._exit(1)


def _child(
    parent: int, backend: str, worker_id: uuid.UUID, claimed: dict[str, Any], pipe: Connection
) -> None:
    _die_with(parent)
    import django

    django.setup()
    from django.db import connections

    from . import registry
    from .attempt import AttemptControl
    from .backend import jobs_backend
    from .values import Claimed
    from .worker.runner import TaskRunner

    jobs = jobs_backend(backend)
    registry.discover(jobs.settings.TASK_MODULES)
    attempt = Claimed(**claimed)
    report = TaskRunner(jobs, worker_id).run(attempt, AttemptControl(attempt.timeout))
    pipe.send(report.portable())
    pipe.close()
    connections.close_all()


def run_isolated(
    backend: str,
    worker_id: uuid.UUID,
    claimed: Claimed,
    on_start: Callable[[BaseProcess], None],
) -> Report | int:
    """Run the attempt in a child; return its report, or the child's exit code if it died.

    ``on_start`` gets the child as soon as it runs, so that a timeout or a
    forced cancel can kill it.
    """
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(
        target=_child,
        # Plain data only: unpickling our classes would import models before setup.
        args=(os.getpid(), backend, worker_id, dataclasses.asdict(claimed), sender),
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
