"""``runworkers --reload``: restart the workers when the project's Python code changes.

For development, as ``runserver`` reloads. Two processes, as with
``runserver``: a parent that only restarts, and a child that runs Django's
autoreloader (``django.utils.autoreload.run_with_reloader``) in its main
thread and the supervisor in a thread beside it. When a watched file
changes, the child stops its workers the way SIGTERM does (each finishes or
releases its jobs within ``SHUTDOWN_GRACE_SECONDS``) and exits with code 3;
the parent starts a new child, which imports the new code.

The parent is ours, not ``autoreload.restart_with_reloader``: on SIGTERM or
Ctrl-C that one kills its child with SIGKILL, and the child's workers, which
are the child's own children, would run on with nobody to stop them. Ours
passes SIGTERM on and waits, and leaves Ctrl-C to the terminal, which sends
it to every process of the group.

What is watched is what the child imported: settings, apps, and every task
module (workers import them at start; the child does too, so that they are
watched). A module a task imports only when it runs is not, until something
imported at start imports it too.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import subprocess
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from django.utils import autoreload

from . import registry
from .backend import jobs_backend
from .supervisor import Supervisor
from .worker import WorkerConfig

logger = logging.getLogger("django_jobs.reloader")

RELOAD_EXIT_CODE = 3  # what autoreload.trigger_reload exits with


def run_reloading(config: WorkerConfig, processes: int) -> int:
    """Run the workers, restarting them on code changes, until stopped; return the exit code."""
    if os.environ.get(autoreload.DJANGO_AUTORELOAD_ENV) == "true":
        autoreload.autoreload_started.connect(_announce_watching, weak=False)
        autoreload.file_changed.connect(_announce_change, weak=False)
        autoreload.run_with_reloader(_serve, config, processes)
        return 0
    return _restart_loop()


def _restart_loop() -> int:
    env = {**os.environ, autoreload.DJANGO_AUTORELOAD_ENV: "true"}
    arguments = autoreload.get_child_arguments()
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if child is not None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)
    # The terminal's Ctrl-C reaches the child too; this process just waits for it.
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    while True:
        child = subprocess.Popen(arguments, env=env, close_fds=False)
        if stopping:  # SIGTERM came before there was a child to pass it to
            child.send_signal(signal.SIGTERM)
        code = child.wait()
        if code != RELOAD_EXIT_CODE or stopping:
            return 128 - code if code < 0 else code  # killed by a signal: as a shell says


def _serve(config: WorkerConfig, processes: int) -> None:
    """The child's supervisor, in the thread ``run_with_reloader`` runs it in."""
    # Imported here, so the reloader watches the task modules; the workers,
    # forked from this process, find them imported.
    registry.discover(jobs_backend(config.backend).settings.TASK_MODULES)
    supervisor = Supervisor(config, processes)
    atexit.register(_stop_workers, supervisor, threading.current_thread())
    supervisor.run(handle_signals=False)


def _stop_workers(supervisor: Supervisor, thread: threading.Thread) -> None:
    """Stop the workers before this process exits: for a reload, SIGTERM or Ctrl-C alike.

    Runs at exit, in the main thread, while the supervisor's (daemon) thread
    still runs. A signal that arrives meanwhile asks again, which makes the
    workers skip the rest of their grace period, instead of ending this
    process and leaving its workers behind.
    """
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signum, frame: supervisor.request_stop())
    supervisor.request_stop()
    thread.join()


def _announce_watching(sender: Any, **kwargs: Any) -> None:
    logger.info(
        "Watching for code changes with %s; the workers restart when a module changes.",
        type(sender).__name__,
    )


def _announce_change(sender: Any, file_path: Path, **kwargs: Any) -> None:
    logger.info("%s changed; stopping the workers to restart them with the new code.", file_path)
