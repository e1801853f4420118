"""Who may see and act on which jobs: the authority policy of the REST API.

One object decides, per request (its user), action and job. The views ask it
three questions and never decide by themselves:

* ``has_permission(request, action)`` — may this request use the endpoint at all?
  ``False`` answers 401/403 (DRF picks which from the authentication classes).
* ``filter_jobs(request, action, queryset)`` — the jobs this request may see
  (``Action.VIEW``) or act on (a verb, by its name in ``django_jobs.verbs.VERBS``:
  ``"cancel"`` ...). A job outside every such set answers **404**, never 403,
  so that a job's existence does not leak across tenants.
* ``has_job_permission(request, action, job)`` — may it take this action on a job
  it can see? ``False`` answers 403: the job is visible, so saying so leaks nothing.

Name another policy with ``DJANGO_JOBS_API["AUTHORITY_POLICY"]`` (a subclass of
``Authority``; subclass ``DefaultAuthority`` to adjust one rule). The default:

* staff users holding the matching Django permission (``django_jobs.view_job``
  to read, each verb's own — ``django_jobs.cancel_job`` ... ``discard_job`` — to
  act, ``django_jobs.view_worker`` for the worker list) see and act on every job;
* the operator actions — the worker list, and pausing or resuming a queue
  (``django_jobs.pause_queue``, the admin dashboard's permission) — are for
  those staff users only: a queue serves every tenant, so no tenant scope
  grants them;
* every other authenticated user — including staff without that permission —
  sees and acts only on jobs whose ``tenant`` is one of theirs, as returned by
  the ``DJANGO_JOBS_API["TENANTS_FOR_USER"]`` hook (default: no tenants, so
  nothing). Jobs without a tenant (``""``) are never in a tenant scope;
* anonymous users get nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from django.db.models import QuerySet
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from django_jobs.models import Job
from django_jobs.verbs import VERBS

from .authority import Authority as Authority  # the interface, re-exported
from .conf import api_settings

if TYPE_CHECKING:
    from rest_framework.views import APIView


class Action(StrEnum):
    """What a request wants to do, when it is not a verb.

    A verb is named as in ``django_jobs.verbs.VERBS`` (``"cancel"``, ``"retry"``
    ...), so the policy's ``action`` is one of these or a verb's name; both
    are strings, and a policy compares them as such.
    """

    VIEW = "view"
    # The worker list shows hosts and pids: operational detail, not a tenant's business.
    VIEW_WORKERS = "view_workers"
    # Pausing a queue stops it for every tenant, so no tenant may do it.
    PAUSE_QUEUE = "pause_queue"


#: Actions on the whole system rather than on jobs: no tenant scope grants them.
OPERATOR_ACTIONS = frozenset({Action.VIEW_WORKERS, Action.PAUSE_QUEUE})
#: Actions on a job: reading it, and every verb.
JOB_ACTIONS: frozenset[str] = frozenset({Action.VIEW, *VERBS})


def no_tenants(user: Any) -> Iterable[str]:
    """The default ``TENANTS_FOR_USER``: nobody has a tenant scope until the project says so."""
    return ()


def tenants_of(request: Request) -> frozenset[str]:
    """The tenants of the request's user, asked of the hook once per request.

    A string is refused rather than iterated: ``return "acme"`` would otherwise
    grant the tenants ``"a"``, ``"c"``, ``"m"`` and ``"e"``.
    """
    cached: frozenset[str] | None = getattr(request, "_django_jobs_tenants", None)
    if cached is not None:
        return cached
    user = request.user
    if user is None or not user.is_authenticated or not user.is_active:
        tenants: frozenset[str] = frozenset()
    else:
        returned = api_settings().tenants_for_user(user)
        # Taken once: a generator checked and then read was empty the second time.
        names = () if isinstance(returned, str | bytes) else tuple(returned)
        if isinstance(returned, str | bytes) or not all(isinstance(t, str) for t in names):
            raise TypeError(
                "DJANGO_JOBS_API['TENANTS_FOR_USER'] must return an iterable of tenant "
                f"names (strings), not {returned!r}."
            )
        tenants = frozenset(names) - {""}
    request._django_jobs_tenants = tenants  # type: ignore[attr-defined]  # a per-request cache
    return tenants


class DefaultAuthority(Authority):
    """Staff with the Django permission: everything; anyone else: their tenants' jobs."""

    #: The Django permission that makes a staff user an operator for each action.
    permissions: dict[str, str] = {
        Action.VIEW: "django_jobs.view_job",
        **{name: verb.permission for name, verb in VERBS.items()},
        Action.VIEW_WORKERS: "django_jobs.view_worker",
        Action.PAUSE_QUEUE: "django_jobs.pause_queue",
    }
    #: What a user may do to the jobs of their own tenants. Narrow it in a
    #: subclass, e.g. ``frozenset({Action.VIEW, "cancel"})``, to keep
    #: quarantine and discard for operators.
    tenant_actions: frozenset[str] = JOB_ACTIONS

    def is_operator(self, request: Request, action: str) -> bool:
        user = request.user
        return bool(
            user is not None
            and user.is_authenticated
            and user.is_active
            and user.is_staff
            and user.has_perm(self.permissions[action])
        )

    def tenants(self, request: Request, action: str) -> frozenset[str]:
        if action not in self.tenant_actions:
            return frozenset()
        return tenants_of(request)

    def has_permission(self, request: Request, action: str) -> bool:
        if action in OPERATOR_ACTIONS:
            return self.is_operator(request, action)
        return bool(request.user is not None and request.user.is_authenticated)

    def filter_jobs(self, request: Request, action: str, queryset: QuerySet[Job]) -> QuerySet[Job]:
        if self.is_operator(request, action):
            return queryset
        tenants = self.tenants(request, action)
        if not tenants:
            return queryset.none()
        return queryset.filter(tenant__in=sorted(tenants))

    def has_job_permission(self, request: Request, action: str, job: Job) -> bool:
        return self.is_operator(request, action) or job.tenant in self.tenants(request, action)


class AuthorityPermission(BasePermission):
    """DRF's gate, asking the configured policy; views name their action in ``authority_action``."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        action: str = getattr(view, "authority_action", Action.VIEW)
        return api_settings().authority.has_permission(request, action)
