"""The operator verbs in the admin: bulk actions on the list, buttons on the job page.

Both paths end in ``django_jobs.control`` with ``actor=request.user`` — the
admin never writes a job row itself, so a click races a worker (or another
operator) exactly as safely as the CLI or the API does: one side wins the
compare-and-set, the other is told why it was refused.

Everything here is built from ``django_jobs.verbs.VERBS``: one bulk action
and one button per verb, with its label, help and past participle. Each
verb needs its own permission (``django_jobs.retry_job`` …), checked by
``may``: for the bulk actions through the ``has_<verb>_permission`` methods
Django asks (``with_verb_permissions``), for the buttons by ``verb_view``; a
user without it is not offered the action at all. Verbs that need a note
(quarantine, discard) ask for the reason on a confirmation page before
anything changes.

Selected rows are applied one by one (``control.apply_many``). The
confirmation page lists at most ``SHOWN`` of them but posts every selected id
back, so "yes" acts on exactly the jobs it counted. "Select all N"
(Django's ``select_across``) applies the verb to every job the list's filter
matches, not just the page: a confirmation page first says how many jobs the
filter matches and to how many of them the verb applies, and the operator's
"yes" carries that count back, so a filter that matches another number by
then is refused (``StaleCountError``) instead of acting on jobs nobody saw.
It then runs as ``control.apply_matching``: batches of ``control.BATCH_SIZE``,
each one transaction. A web request is still the wrong place to walk a
million rows: above ``ACROSS_LIMIT`` the page says to narrow the filter or use
``manage.py jobs VERB --state ... --yes``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.text import format_lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from .. import control
from ..exceptions import InvalidTransitionError, JobNotFoundError, OperatorRequestError
from ..models import Job
from ..verbs import VERBS, Verb

if TYPE_CHECKING:
    from .jobs import JobAdmin

#: The most selected jobs one bulk action takes: checked before the confirmation
#: page, so that page never posts back more ids than this.
BULK_LIMIT = 1000
#: The most jobs a confirmation page lists; the rest are counted ("… and N more").
SHOWN = 100
#: The most jobs one "select all N" action walks within a web request: about
#: 12 s at the 430 jobs/s measured on PostgreSQL (docs/admin.md).
ACROSS_LIMIT = 5_000
# How many refusal reasons one message lists before it summarises the rest.
REASONS_SHOWN = 10


def may(request: HttpRequest, verb: Verb) -> bool:
    """Whether the user holds the verb's permission: the one check of every admin path."""
    return request.user.has_perm(verb.permission)


def user_verbs(request: HttpRequest) -> list[Verb]:
    """The verbs this user holds the permission for, in ``VERBS``' order."""
    return [verb for verb in VERBS.values() if may(request, verb)]


def with_verb_permissions[AdminClass: type](cls: AdminClass) -> AdminClass:
    """Give the admin a ``has_<verb>_permission`` per verb, all asking ``may``.

    Django offers a bulk action only to users for whom the admin's
    ``has_<name>_permission(request)`` is true, for a ``<name>`` in the action's
    ``allowed_permissions`` (each bulk action names its verb). The methods are
    built from ``VERBS``, so a verb cannot lack its check.
    """
    for verb in VERBS.values():
        setattr(cls, f"has_{verb.name}_permission", _permission_check(verb))
    return cls


def _permission_check(verb: Verb) -> Callable[[admin.ModelAdmin[Job], HttpRequest], bool]:
    def check(model_admin: admin.ModelAdmin[Job], request: HttpRequest) -> bool:
        return may(request, verb)

    check.__name__ = check.__qualname__ = f"has_{verb.name}_permission"
    return check


def _asked_to_stop(count: int) -> str:
    """The running jobs cancel only asked to stop: they may still end succeeded."""
    return ngettext(
        "%(count)d running job asked to stop (cancelling)",
        "%(count)d running jobs asked to stop (cancelling)",
        count,
    ) % {"count": count}


def report(request: HttpRequest, verb: Verb, result: control.BulkResult) -> None:
    """One message for what changed, one for what was refused and why.

    Running jobs that cancel only asked to stop are counted apart, not as cancelled.
    """
    stopping = len(result.stopping)
    if result.changed:
        done = len(result.changed) - stopping
        parts = []
        if done:
            parts.append(
                ngettext("%(count)d job %(done)s", "%(count)d jobs %(done)s", done)
                % {"count": done, "done": verb.done}
            )
        if stopping:
            parts.append(_asked_to_stop(stopping))
        messages.success(request, "; ".join(parts) + ".")
    if result.refused:
        reasons = [f"{reason}" for reason in list(result.refused.values())[:REASONS_SHOWN]]
        more = len(result.refused) - len(reasons)
        if more:
            reasons.append(_("… and %(count)d more.") % {"count": more})
        messages.warning(
            request,
            ngettext(
                "%(count)d job refused: %(reasons)s",
                "%(count)d jobs refused: %(reasons)s",
                len(result.refused),
            )
            % {"count": len(result.refused), "reasons": " ".join(reasons)},
        )
    if result.reruns:
        messages.info(
            request,
            _("New jobs: %(ids)s") % {"ids": ", ".join(str(i) for i in result.reruns.values())},
        )
    if not result.changed and not result.refused:
        messages.info(request, _("No job was selected."))


def report_matching(request: HttpRequest, verb: Verb, result: control.MatchingResult) -> None:
    """What a verb over a whole filter did, as counts: changed, asked to stop, skipped."""
    stopping = len(result.stopping)
    stopped = f"; {_asked_to_stop(stopping)}" if stopping else ""
    messages.success(
        request,
        _("%(changed)d of %(matched)d matching jobs %(done)s%(stopped)s; %(skipped)d skipped.")
        % {
            "changed": len(result.changed) - stopping,
            "matched": result.matched,
            "done": verb.done,
            "stopped": stopped,
            "skipped": result.skipped,
        },
    )


def _confirm(
    request: HttpRequest,
    model_admin: JobAdmin,
    verb: Verb,
    jobs: Sequence[Job],
    *,
    bulk: bool,
    error: str = "",
    note: str = "",
    matching: control.Matching | None = None,
) -> TemplateResponse:
    """The page that asks before a verb: a reason where one is needed, the count across pages."""
    opts = model_admin.model._meta
    count = len(jobs) if matching is None else matching.matched
    context = {
        **model_admin.admin_site.each_context(request),
        "title": _("%(verb)s %(count)d job(s)?") % {"verb": verb.label, "count": count},
        "subtitle": None,
        "opts": opts,
        "verb": verb,
        "jobs": jobs[:SHOWN],
        "more": max(0, count - len(jobs[:SHOWN])),
        "bulk": bulk,
        # Posted back: every selected job, not only those shown, so "yes" acts on
        # what was counted. Across pages the filter is the selection and these
        # (the preview) are ignored, but Django runs no confirmed action without one.
        "selected": [job.pk for job in jobs] if bulk else [],
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "action_name": f"{verb.name}_jobs",
        "error": error,
        "note": note,
        "matching": matching,
        "changelist_url": reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"),
        "media": model_admin.media,
    }
    return TemplateResponse(request, "django_jobs/admin/job/confirm.html", context)


def _bulk(
    verb: Verb,
) -> Callable[[JobAdmin, HttpRequest, QuerySet[Job]], HttpResponse | None]:
    def action(
        model_admin: JobAdmin, request: HttpRequest, queryset: QuerySet[Job]
    ) -> HttpResponse | None:
        if request.POST.get("select_across") == "1":
            return _across(model_admin, request, verb, queryset)
        ids = list(queryset.order_by().values_list("id", flat=True)[: BULK_LIMIT + 1])
        if len(ids) > BULK_LIMIT:
            messages.error(
                request,
                _(
                    "%(verb)s takes at most %(limit)d jobs at a time; narrow the filter, "
                    "or use manage.py jobs for more."
                )
                % {"verb": verb.label, "limit": BULK_LIMIT},
            )
            return None
        note = request.POST.get("note", "").strip()
        if verb.needs_note and "confirm" not in request.POST:
            jobs = list(Job.objects.filter(id__in=ids).only("id", "task_name", "state"))
            return _confirm(request, model_admin, verb, jobs, bulk=True)
        if verb.needs_note and not note:
            jobs = list(Job.objects.filter(id__in=ids).only("id", "task_name", "state"))
            return _confirm(
                request,
                model_admin,
                verb,
                jobs,
                bulk=True,
                error=_("Say why: a reason is required."),
            )
        try:
            done = control.apply_many(verb.name, ids, actor=request.user, note=note)
        except OperatorRequestError as exc:  # a note the audit trail cannot keep
            jobs = list(Job.objects.filter(id__in=ids).only("id", "task_name", "state"))
            return _confirm(request, model_admin, verb, jobs, bulk=True, error=str(exc))
        report(request, verb, done)
        return None

    action.__name__ = f"{verb.name}_jobs"
    description = format_lazy(gettext_lazy("{} selected jobs"), verb.label)
    return admin.action(permissions=[verb.name], description=description)(action)


def _across(
    model_admin: JobAdmin, request: HttpRequest, verb: Verb, queryset: QuerySet[Job]
) -> HttpResponse | None:
    """ "Select all N": every job of the filter, once the operator confirmed how many."""
    note = request.POST.get("note", "").strip()
    expected = request.POST.get("expected", "")
    if "confirm" in request.POST and expected.isdigit() and (note or not verb.needs_note):
        try:
            result = control.apply_matching(
                verb.name, queryset, actor=request.user, note=note, expected=int(expected)
            )
        except OperatorRequestError as exc:  # a stale count, a note the trail cannot keep
            messages.error(request, str(exc))
            return None
        report_matching(request, verb, result)
        return None
    matching = control.count_matching(verb.name, queryset)
    if matching.matched > ACROSS_LIMIT:
        messages.error(
            request,
            _(
                "The filter matches %(count)d jobs; the admin acts on at most %(limit)d at "
                "a time. Narrow the filter, or use manage.py jobs %(verb)s with the same "
                "filters."
            )
            % {"count": matching.matched, "limit": ACROSS_LIMIT, "verb": verb.name},
        )
        return None
    jobs = list(queryset.order_by("-enqueued_at").only("id", "task_name", "state")[:SHOWN])
    missing = "confirm" in request.POST and verb.needs_note and not note
    return _confirm(
        request,
        model_admin,
        verb,
        jobs,
        bulk=True,
        matching=matching,
        error=_("Say why: a reason is required.") if missing else "",
    )


BULK_ACTIONS = [_bulk(verb) for verb in VERBS.values()]


def verb_view(
    model_admin: JobAdmin, request: HttpRequest, object_id: uuid.UUID, verb_name: str
) -> HttpResponse:
    """A button on the job page: GET shows the confirmation, POST acts."""
    verb = VERBS.get(verb_name)
    if verb is None:
        raise Http404(f"No verb {verb_name!r}.")
    if not may(request, verb):
        raise PermissionDenied
    job = Job.objects.only("id", "task_name", "state").filter(id=object_id).first()
    if job is None:
        raise Http404(f"No job {object_id}.")
    change_url = reverse("admin:django_jobs_job_change", args=[job.pk])
    if request.method != "POST":
        return _confirm(request, model_admin, verb, [job], bulk=False)
    note = request.POST.get("note", "").strip()
    if verb.needs_note and not note:
        return _confirm(
            request, model_admin, verb, [job], bulk=False, error=_("Say why: a reason is required.")
        )
    try:
        done = control.perform(verb.name, job.pk, actor=request.user, note=note)
    except OperatorRequestError as exc:  # a note the audit trail cannot keep
        return _confirm(request, model_admin, verb, [job], bulk=False, error=str(exc))
    except (InvalidTransitionError, JobNotFoundError) as exc:
        messages.warning(request, _("Refused: %(reason)s") % {"reason": exc})
        return HttpResponseRedirect(change_url)
    if done.rerun is not None:
        # The operator wants to watch the new job: take them to it.
        messages.success(request, _("Job %(done)s: this is the new job.") % {"done": verb.done})
        return HttpResponseRedirect(reverse("admin:django_jobs_job_change", args=[done.rerun]))
    messages.success(
        request,
        _("Job %(done)s: it is now %(state)s.") % {"done": verb.done, "state": done.to_state.label},
    )
    return HttpResponseRedirect(change_url)


def job_buttons(request: HttpRequest, job: Job) -> list[dict[str, Any]]:
    """The verbs this user may apply to this job in its current state."""
    now = timezone.now()
    return [
        {
            "verb": verb,
            "url": reverse("admin:django_jobs_job_verb", args=[job.pk, verb.name]),
        }
        for verb in user_verbs(request)
        if verb.applies_to_job(job.state, job.run_after, now)
    ]
