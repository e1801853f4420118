from django.test import TestCase, TransactionTestCase
from receipts import checkout, email_receipt, render_receipt

from django_jobs.testing import assert_enqueued, assert_not_enqueued, captured_jobs, drain


class CheckoutTests(TestCase):
    def test_checkout_enqueues_the_receipt_and_its_email(self):
        with captured_jobs() as jobs:
            checkout(42)

        assert_enqueued(render_receipt, args=[42], count=1)
        assert_enqueued(email_receipt, args=[42])  # waiting for the receipt
        self.assertEqual([job.task.name for job in jobs], ["render_receipt", "email_receipt"])

    def test_drain_runs_the_receipt_then_the_email(self):
        checkout(42)

        drained = drain()

        self.assertEqual(drained.counts, {"succeeded": 2})
        receipt, email = drained.results
        self.assertEqual(receipt.return_value, "receipt-42.pdf")
        self.assertTrue(email.return_value.startswith("sent receipt 42"))
        assert_not_enqueued(email_receipt)

    def test_a_bad_order_is_retried_then_exhausted_without_waiting(self):
        render_receipt.enqueue(-1)

        drained = drain()

        self.assertEqual((drained.attempts, drained.failed), (3, 1))
        self.assertEqual(drained.ran[-1].error, "builtins.ValueError: no order -1")


class CommittedCheckoutTests(TransactionTestCase):
    def test_drain_works_on_committed_rows_too(self):
        checkout(7)

        self.assertEqual(drain().succeeded, 2)
