"""pytest fixtures for testing your tasks: ``jobs`` and ``jobs_worker``.

Registered through the ``pytest11`` entry point, so pytest loads this module
in every project that has django-jobs installed — also in projects (or test
runs) that do not configure Django at all. So it imports nothing but the
package's root (which reads no settings and loads no model); the fixtures
import ``django_jobs.testing`` when a test asks for one. And since django-jobs
does not depend on pytest, it imports without pytest too: then the fixtures
are plain functions that nothing calls.

Both fixtures work on the ``default`` backend (``Jobs("other")`` and
``JobsWorker("other")`` serve another) and need the database: a test marked
``django_db`` gets what its marker asks for; a test with no marker is given
pytest-django's ``db``, as if it had asked for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from django_jobs.testing import Jobs, JobsWorker

try:
    import pytest
except ModuleNotFoundError:  # django-jobs installed without pytest: no test will ask
    pytest = None  # type: ignore[assignment]


def _fixture[F: Callable[..., Any]](function: F) -> F:
    """pytest's ``fixture``; without pytest, the function as it is."""
    if pytest is None:
        return function
    return cast("F", pytest.fixture(function))


def _database(request: Any) -> None:
    """The database access a test with no ``django_db`` marker would get from ``db``."""
    if request.node.get_closest_marker("django_db") is None and not (
        {"db", "transactional_db"} & set(request.fixturenames)
    ):
        request.getfixturevalue("db")


@_fixture
def jobs(request: Any) -> Jobs:
    """django_jobs.testing's helpers bound to the default backend: drain, assert_enqueued, ..."""
    _database(request)
    from django_jobs.testing import Jobs

    return Jobs()


@_fixture
def jobs_worker(request: Any) -> JobsWorker:
    """A worker that runs what is due each time it is called; ``.ran`` is everything it ran."""
    _database(request)
    from django_jobs.testing import JobsWorker

    return JobsWorker()
