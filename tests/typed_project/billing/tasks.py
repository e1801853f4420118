"""Tasks declared every way the docs show, with ``django_jobs.task``."""

from __future__ import annotations

import django_jobs
from django_jobs import Backoff, JobContext, RetryLater, task


@task
def add(a: int, b: int) -> int:
    return a + b


@django_jobs.task
def ping() -> None:
    return None


@task(
    queue_name="emails",
    priority=10,
    backend="default",
    max_attempts=5,
    timeout=30,
    backoff=Backoff(base=2, cap=300),
    retry_on=(ConnectionError, TimeoutError),
    give_up_on=(ValueError,),
    version="2",
)
def send_receipt(order_id: int, *, resend: bool = False) -> str:
    return f"receipt {order_id} {resend}"


@task(max_attempts=10, backoff=2.5)
def poll_export(export_id: str) -> str:
    raise RetryLater(30, "export not ready")


@task(takes_context=True, max_attempts=4)
def rebuild_index(context: JobContext, shard_ids: list[int]) -> int:
    for n, _shard in enumerate(shard_ids, 1):
        context.raise_if_cancelled()
        context.set_progress(n, len(shard_ids), message=f"shard {n}")
    if context.cancelled or context.is_last_attempt:
        return 0
    key: str = context.stable_key
    attempt: int = context.attempt
    started = context.task_result.started_at
    return len(key) + attempt + (0 if started is None else 1) + context.job_id.int % 2


@task(takes_context=True)
async def fetch_page(context: JobContext, url: str) -> bytes:
    return f"{context.attempt_number} {url}".encode()


@task
async def count_words(text: str) -> int:
    return len(text.split())


def _summarise(order: str) -> dict[str, object]:
    return {"order": order}


summarise = task(_summarise, max_attempts=2)


def charge_card(order_id: int, *, cents: int) -> dict[str, int]:
    return {"order": order_id, "cents": cents}


@task(takes_context=True, max_attempts=3)
def fulfil(context: JobContext, order_id: int) -> int:
    charge: dict[str, int] = context.step("charge", charge_card, order_id, cents=900)
    context.sleep(60, name="cool-off")
    context.sleep_until(context.task_result.run_after)
    shipped: str = context.step("ship", lambda: f"parcel {order_id}")
    return charge["cents"] + len(shipped)
