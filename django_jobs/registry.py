"""Which tasks this process may run, by name.

A job row names its task by module path. Workers look that name up here and
never import it: a row that names an arbitrary dotted path (written by hand,
by an older deploy, or by an attacker with database access) is refused, not
executed. Tasks register themselves when ``@task`` builds them; workers import
every installed app's ``tasks`` module (and ``TASK_MODULES``) at start-up.
"""

from __future__ import annotations

import threading
from importlib import import_module
from typing import Any

from django.utils.module_loading import autodiscover_modules

from .framework import Task

_tasks: dict[str, Task[Any, Any]] = {}
_lock = threading.Lock()


def register(task: Task[Any, Any]) -> None:
    """Remember the task under its module path.

    ``.using()`` copies share the function and are not registered again, so
    the registered entry keeps the decorator's policy, not one call's identity.
    """
    name = task.module_path
    with _lock:
        known = _tasks.get(name)
        if known is None or known.func is not task.func:
            _tasks[name] = task


def get(name: str) -> Task[Any, Any] | None:
    return _tasks.get(name)


def is_registered(task: Task[Any, Any]) -> bool:
    known = _tasks.get(task.module_path)
    return known is not None and known.func is task.func


def names() -> list[str]:
    return sorted(_tasks)


def discover(extra_modules: tuple[str, ...] = ()) -> None:
    """Import every app's ``tasks`` module and the configured extra modules."""
    autodiscover_modules("tasks")
    for module in extra_modules:
        import_module(module)
