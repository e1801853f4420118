"""The type variables of django-jobs' task classes, and Django's classes made subscriptable.

django-stubs declares ``Task``, ``TaskResult`` and ``TaskContext`` generic over
the task function's parameters and return type, so ``JobTask`` and
``JobResult`` derive from ``Task[P, T]`` and ``TaskResult[P, T]`` to be checked
the same way. Django's classes are not generic at run time and take no
subscript: the bases here add one, and nothing else (no slot, no field). A type
checker sees Django's classes themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic

from typing_extensions import ParamSpec, TypeVar

from .framework import Task, TaskContext, TaskResult

# The task function's parameters and return type. The defaults let a bare
# ``JobTask`` or ``JobResult`` annotation mean "any task", as it did before
# these classes were generic, also under ``mypy --strict``. (Python 3.12's
# ``class C[**P, T]`` syntax takes no defaults: hence ``Generic``.)
P = ParamSpec("P", default=...)
T = TypeVar("T", default=Any)

if TYPE_CHECKING:
    GenericTask = Task
    GenericTaskResult = TaskResult
    GenericTaskContext = TaskContext
else:

    class GenericTask(Task, Generic[P, T]):
        __slots__ = ()

    class GenericTaskResult(TaskResult, Generic[P, T]):
        __slots__ = ()

    class GenericTaskContext(TaskContext, Generic[P, T]):
        __slots__ = ()
