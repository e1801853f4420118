"""The operator verbs, declared once: cancel, retry, quarantine, release, discard,
run_now, rerun.

A verb is what an operator asks for; the transitions it may take are rows of
``states.TRANSITIONS``, tried in order, and the first that the job's current
state allows is taken. One verb, ``rerun``, changes no state: it copies a
finished job into a new one (``copies_from``). Everything the interfaces
show or check about a verb is declared here too, and each of them is built
from ``VERBS`` instead of listing the verbs again:

* ``control.apply`` refuses an unknown verb, and a missing note, from it;
* ``Job.Meta.permissions`` holds one permission per verb;
* the admin offers a bulk action and a button per verb, each behind its permission;
* the REST API routes ``POST <id>/<verb>/``, with its docs and permission;
* ``manage.py jobs`` has a subcommand per verb.

So adding a verb here adds it to all of them (``tests/test_verbs.py`` checks
that); what its transitions write on the row is ``transitions.operate``'s work.

What each verb does:

* ``cancel`` — a waiting or queued job is cancelled at once; a running job
  becomes ``cancelling``: its task sees ``context.cancelled``, and a task that
  ignores it is stopped by force after ``CANCEL_GRACE_SECONDS``.
* ``retry`` — a job that did not succeed (or is quarantined) is queued again
  with a fresh attempt budget (the ``max_attempts`` it was enqueued with).
* ``quarantine`` — hold a queued or unsuccessful job; it never runs until
  released. A note is required.
* ``release`` — a quarantined job is queued again, with at least one attempt left.
* ``discard`` — accept the loss of a job that will not succeed; a note is required.
* ``run_now`` — a queued job scheduled for later (delayed, or waiting out a
  retry's backoff) becomes due at once. A queued job already due is refused:
  nothing would change.
* ``rerun`` — a new job copied from a finished one that is not held (task,
  arguments, queue, priority, tenant, concurrency key, timeout, attempt
  budget; not its idempotency key, deadline or dependencies). The original
  is left as it is; each names the other in its audit trail, and the copy's
  ``rerun_of`` holds the original's id.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from .states import RERUNNABLE, TRANSITIONS, JobState, Transition, allowed

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise


@dataclass(frozen=True, slots=True)
class Verb:
    """One operator verb: what it may do to a job, who may ask, and how it is shown."""

    #: The word for it everywhere: ``control.apply``'s argument, the API's URL
    #: segment, the CLI's subcommand, the permission's codename.
    name: str
    #: The transitions it may take, tried in order: the first the job's state allows wins.
    transitions: tuple[Transition, ...]
    #: Refused without a note saying why (kept in the audit trail).
    needs_note: bool
    #: The name of its permission, as ``Job.Meta.permissions`` (and the database) holds it.
    permission_name: str
    #: The text of its button and bulk action: "Retry".
    label: StrOrPromise
    #: Its past participle, for saying what changed: "3 jobs retried."
    done: StrOrPromise
    #: One line saying what it does: the admin's tooltip and confirmation page,
    #: the CLI's ``--help`` and the API's docs (the last two with ``description``).
    help: StrOrPromise
    #: The states of the jobs it copies into a new one, leaving them as they
    #: are (``rerun``); such a verb takes no transition.
    copies_from: frozenset[JobState] = frozenset()
    #: Applies only to a job whose ``run_after`` is in the future (``run_now``).
    only_scheduled: bool = False

    @property
    def codename(self) -> str:
        """The permission's codename: ``<verb>_job``, as the migrations created it."""
        return f"{self.name}_job"

    @property
    def permission(self) -> str:
        """The permission as ``user.has_perm()`` takes it."""
        return f"django_jobs.{self.codename}"

    def applies_to(self, state: JobState | str) -> bool:
        """Whether a job in ``state`` may take it (``only_scheduled`` aside)."""
        return JobState(state) in self.copies_from or any(
            allowed(transition, state) for transition in self.transitions
        )

    def applies_to_job(self, state: JobState | str, run_after: datetime, now: datetime) -> bool:
        """``applies_to``, and for ``only_scheduled`` a ``run_after`` still ahead of ``now``."""
        return self.applies_to(state) and (not self.only_scheduled or run_after > now)

    def source_states(self) -> list[JobState]:
        """The states it applies to, in ``JobState``'s order."""
        sources = {state for t in self.transitions for state in TRANSITIONS[t].sources}
        return [state for state in JobState if state in sources or state in self.copies_from]

    @property
    def description(self) -> StrOrPromise:
        """``help``, the states it applies to, and whether a note is required.

        Where nothing else says so: the CLI's ``--help`` and the API's docs.
        """
        states = ", ".join(state.value for state in self.source_states())
        note = " A note is required." if self.needs_note else ""
        scheduled = " and scheduled for later" if self.only_scheduled else ""
        return format_lazy(
            "{} It applies to jobs that are {}{}.{}", self.help, states, scheduled, note
        )


VERBS: dict[str, Verb] = {
    verb.name: verb
    for verb in (
        Verb(
            name="cancel",
            transitions=(Transition.CANCEL, Transition.REQUEST_CANCEL),
            needs_note=False,
            permission_name="Can cancel jobs",
            label=_("Cancel"),
            done=_("cancelled"),
            help=_(
                "Cancel a job: at once if it is not running; a running one is asked to "
                "stop, and stopped by force after CANCEL_GRACE_SECONDS."
            ),
        ),
        Verb(
            name="retry",
            transitions=(Transition.RETRY,),
            needs_note=False,
            permission_name="Can retry jobs",
            label=_("Retry"),
            done=_("retried"),
            help=_("Queue a job again, with a fresh attempt budget."),
        ),
        Verb(
            name="quarantine",
            transitions=(Transition.QUARANTINE,),
            needs_note=True,
            permission_name="Can quarantine jobs",
            label=_("Quarantine"),
            done=_("quarantined"),
            help=_("Hold a job: it never runs until released."),
        ),
        Verb(
            name="release",
            transitions=(Transition.RELEASE,),
            needs_note=False,
            permission_name="Can release quarantined jobs",
            label=_("Release"),
            done=_("released"),
            help=_("Queue a quarantined job again, with at least one attempt left."),
        ),
        Verb(
            name="discard",
            transitions=(Transition.DISCARD,),
            needs_note=True,
            permission_name="Can discard jobs",
            label=_("Discard"),
            done=_("discarded"),
            help=_("Accept the loss of a job that will not succeed: it will not run."),
        ),
        Verb(
            name="run_now",
            transitions=(Transition.RUN_NOW,),
            needs_note=False,
            permission_name="Can run scheduled jobs now",
            label=_("Run now"),
            done=_("made due now"),
            help=_(
                "Make a job scheduled for later (delayed, or waiting out a retry's "
                "backoff) due at once."
            ),
            only_scheduled=True,
        ),
        Verb(
            name="rerun",
            transitions=(),
            needs_note=False,
            permission_name="Can rerun finished jobs",
            label=_("Rerun"),
            done=_("rerun"),
            help=_(
                "Enqueue a new job copied from a finished one (task, arguments, queue, "
                "priority, tenant; not its idempotency key); the original stays as it is."
            ),
            copies_from=RERUNNABLE,
        ),
    )
}
