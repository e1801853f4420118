"""The tasks the testing examples test: a receipt, and the email it sends once it exists."""

from django_jobs import Backoff, task
from django_jobs.tasks import JobContext


@task(max_attempts=3, backoff=Backoff(base=30))
def render_receipt(order_id: int) -> str:
    if order_id < 0:
        raise ValueError(f"no order {order_id}")
    return f"receipt-{order_id}.pdf"


@task(takes_context=True)
def email_receipt(context: JobContext, order_id: int) -> str:
    return f"sent receipt {order_id} (job {context.job_id}, attempt {context.attempt})"


def checkout(order_id: int) -> None:
    """What a view would do: render the receipt, then email it once it exists."""
    receipt = render_receipt.enqueue(order_id)
    email_receipt.using(after=receipt).enqueue(order_id)
