"""Repairs from a project's own code: what the admin's buttons and bulk actions call."""

import uuid
from typing import Any

from django_jobs import control
from django_jobs.models import Job


def start_now(job_id: uuid.UUID, user: Any) -> None:
    control.run_now(job_id, actor=user)  # a job scheduled for later is due at once


def run_again(job_id: uuid.UUID) -> Job:
    # A new queued job copied from a finished one; the audit trail links the two.
    return control.rerun(job_id, actor="ops:alice")


def retry_failed_mail(confirmed: int | None = None) -> control.MatchingResult:
    """Every failed job of the mail queue, once an operator confirmed how many there are."""
    jobs = Job.objects.filter(queue="mail", state="failed")
    if confirmed is None:
        confirmed = control.count_matching("retry", jobs).matched  # show it, ask
    # Refused (StaleCountError, nothing changed) if the filter now matches another number.
    return control.apply_matching("retry", jobs, actor="ops", expected=confirmed)
