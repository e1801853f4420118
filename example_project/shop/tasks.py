"""The shop's background work, written against Django's own Tasks API.

``@task`` is django_jobs', which is Django's ``@task`` typed with our retry
options (and on Django 6.0, whose ``@task`` takes only its own options, the
way to give them); ``.enqueue()`` is Django's, and ``TASKS`` in settings sends
the jobs to django_jobs. The failures are deterministic so the demo always
tells the same story.
"""

import time

from django_jobs import JobContext, task

from .models import Order, Receipt

# The one order whose card the payment gateway never answers for.
DECLINED_EMAIL = "declined@example.com"


class PaymentGatewayTimeout(Exception):
    """The (pretend) payment gateway did not answer in time."""


def sequence(order: Order) -> int:
    """The running number of a demo order: ``DEMO-0012`` is 12."""
    return int(order.number.rsplit("-", 1)[-1])


def inventory_failures(order: Order) -> int:
    """How many times the inventory service fails for this order before it answers.

    Every sixth order fails once or twice, which the retry policy absorbs.
    """
    n = sequence(order)
    return 0 if n % 6 else 1 + (n // 6) % 2


@task(queue_name="receipts")
def send_receipt(order_id: int) -> str:
    """Send the receipt, at most once per order however often this runs.

    The job may run twice (a worker can die after sending but before reporting),
    so the effect is keyed by the order: ``get_or_create`` on a unique column.
    """
    order = Order.objects.get(pk=order_id)
    receipt, created = Receipt.objects.get_or_create(order=order, defaults={"email": order.email})
    time.sleep(0.02 + 0.01 * (order_id % 3))  # the mail server is not instant
    return f"receipt {receipt.pk} {'sent' if created else 'already sent'}"


@task(takes_context=True, max_attempts=4, backoff=0.2)
def sync_inventory(context: JobContext, order_id: int) -> int:
    """Tell the (pretend) inventory service; it drops some connections at first."""
    order = Order.objects.get(pk=order_id)
    if context.attempt <= inventory_failures(order):
        raise ConnectionError(
            f"inventory service reset the connection (order {order.number}, "
            f"attempt {context.attempt} of {context.max_attempts})"
        )
    time.sleep(0.01)
    return sequence(order)


@task(max_attempts=3, backoff=0.2)
def charge_card(order_id: int) -> str:
    """Charge the card; for one order the gateway never answers, so the job exhausts."""
    order = Order.objects.get(pk=order_id)
    if order.email == DECLINED_EMAIL:
        raise PaymentGatewayTimeout(f"payment gateway timed out charging {order.number}")
    time.sleep(0.01)
    return f"charged {order.total} to {order.number}"
