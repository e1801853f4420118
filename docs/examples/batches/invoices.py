"""Bill every account, then send one report when all of them are done."""

from typing import Any

import django_jobs
from django_jobs import callback, task
from django_jobs.models import Batch


@task(max_attempts=3)
def bill(account_id: int) -> int:
    if account_id < 0:
        raise KeyError(f"no account {account_id}")
    return account_id * 100


@task
def send_report(month: str, *, batch: dict[str, Any]) -> str:
    # batch: {"id", "label", "total", "succeeded", "failed", "cancelled"}
    return f"{month}: {batch['succeeded']} of {batch['total']} billed, {batch['failed']} failed"


@task
def close_month(month: str, *, batch: dict[str, Any]) -> str:
    return f"{month} closed"


def bill_month(month: str, account_ids: list[int]) -> Batch:
    """What a view or a schedule would do: one job per account, two callbacks."""
    with django_jobs.batch(
        on_finish=callback(send_report, month),  # once every bill has settled
        on_success=callback(close_month, month),  # only if every bill succeeded
        label=f"billing {month}",
    ) as billing:
        django_jobs.enqueue_many(bill, [((account,), {}) for account in account_ids])
    return billing
