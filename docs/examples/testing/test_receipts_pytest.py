from datetime import timedelta

from django.utils import timezone
from receipts import checkout, email_receipt, render_receipt


def test_checkout_enqueues_the_receipt(jobs):
    checkout(42)

    jobs.assert_enqueued(render_receipt, args=[42])


def test_the_email_goes_out_after_the_receipt(jobs_worker):
    checkout(42)

    drained = jobs_worker()

    assert [r.task_name.rsplit(".", 1)[1] for r in drained.ran] == [
        "render_receipt",
        "email_receipt",
    ]


def test_a_receipt_scheduled_for_tomorrow_waits_unless_asked(jobs):
    render_receipt.using(run_after=timezone.now() + timedelta(days=1)).enqueue(1)

    assert jobs.drain().attempts == 0
    assert jobs.drain(with_scheduled=True).succeeded == 1
    jobs.assert_not_enqueued(email_receipt)
