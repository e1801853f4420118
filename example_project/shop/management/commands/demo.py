"""``manage.py demo``: orders and their jobs, two worker processes, a bar and a summary.

1. Deletes the previous demo's orders and shop jobs.
2. Creates the orders and enqueues their jobs in the same transaction: the
   jobs exist if and only if the orders do.
3. Runs ``runworkers --burst`` as a subprocess (two processes, four threads
   each), which exits once nothing is queued or running. Each receipt waits
   for its order's charge (``after=``), so the declined card's receipt is
   never sent: it waits for an operator to retry the charge.
4. Shows finished jobs as they happen, then a summary.
"""

import subprocess
import sys
import tempfile
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.db.models import Count, Q, Sum
from tqdm import tqdm

from django_jobs.models import Job
from django_jobs.states import FINISHED_STATES, JobState
from shop.models import Order
from shop.tasks import DECLINED_EMAIL, charge_card, send_receipt, sync_inventory

MANAGE_PY = Path(__file__).resolve().parents[3] / "manage.py"
TASK_PREFIX = "shop.tasks."
FINISHED = [str(state) for state in FINISHED_STATES]


class Command(BaseCommand):
    help = "Create demo orders, enqueue their jobs, run workers in burst mode, summarise."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--orders", type=int, default=60, help="Orders to create (60).")
        parser.add_argument("--processes", type=int, default=2, help="Worker processes (2).")
        parser.add_argument("--concurrency", type=int, default=4, help="Threads each (4).")
        parser.add_argument(
            "--timeout",
            type=float,
            default=300.0,
            help="Stop the workers (SIGTERM) if they are not done after this many seconds.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        count = options["orders"]
        if count < 1:
            raise CommandError("--orders must be at least 1.")
        self.reset()
        total = self.enqueue(count)
        self.stdout.write(
            f"Created {count} orders and enqueued {total} jobs in one transaction; "
            f"running {options['processes']} worker processes x "
            f"{options['concurrency']} threads."
        )
        started = time.monotonic()
        code, log = self.run_workers(
            total, options["processes"], options["concurrency"], options["timeout"]
        )
        elapsed = time.monotonic() - started
        self.show_worker_log(log, failed=code != 0)
        unfinished = self.summarise(elapsed)
        if code != 0:
            raise CommandError(f"runworkers exited with status {code}.")
        if unfinished:
            raise CommandError(f"{unfinished} job(s) did not finish.")

    # -- steps ------------------------------------------------------------

    def reset(self) -> None:
        jobs, _ = Job.objects.filter(task_name__startswith=TASK_PREFIX).delete()
        orders, _ = Order.objects.all().delete()
        if jobs or orders:
            self.stdout.write("Deleted the previous demo's orders and jobs.")

    def enqueue(self, count: int) -> int:
        enqueued = 0
        with transaction.atomic():
            for n in range(1, count + 1):
                order = Order.objects.create(
                    number=f"DEMO-{n:04d}",
                    email=DECLINED_EMAIL if n == 13 else f"customer{n}@example.com",
                    total=Decimal(10 + n % 7 * 5) + Decimal("0.99"),
                )
                # The receipt waits until the card is charged; a repeated
                # enqueue of the receipt for the same order returns the existing
                # job instead of a second one.
                charge = charge_card.using(priority=10).enqueue(order.pk)
                sync_inventory.enqueue(order.pk)
                receipt = send_receipt.using(
                    idempotency_key=f"receipt:{order.number}", after=[charge]
                )
                receipt.enqueue(order.pk)
                receipt.enqueue(order.pk)
                enqueued += 3
        return enqueued

    def run_workers(
        self, total: int, processes: int, concurrency: int, timeout: float
    ) -> tuple[int, str]:
        command = [
            sys.executable,
            str(MANAGE_PY),
            "runworkers",
            "--burst",
            "--processes",
            str(processes),
            "--concurrency",
            str(concurrency),
            "-v",
            "0",
        ]
        jobs = Job.objects.filter(task_name__startswith=TASK_PREFIX)
        # Worker warnings go to a file, so they do not tear the progress bar.
        with tempfile.TemporaryFile("w+") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + timeout
            with tqdm(total=total, unit="job", desc="jobs finished", dynamic_ncols=True) as bar:
                while True:
                    done = process.poll() is not None
                    counts = Counter(
                        dict(jobs.order_by().values_list("state").annotate(n=Count("id")))
                    )
                    finished = sum(counts[state] for state in FINISHED)
                    bar.set_postfix(
                        waiting=counts[JobState.WAITING],
                        queued=counts[JobState.QUEUED],
                        running=counts[JobState.RUNNING] + counts[JobState.CANCELLING],
                        refresh=False,
                    )
                    bar.update(finished - bar.n)
                    if done:
                        break
                    if time.monotonic() > deadline and process.returncode is None:
                        bar.write(f"Workers still busy after {timeout:g}s; stopping them.")
                        process.terminate()
                        deadline = float("inf")
                    time.sleep(0.2)
            log.seek(0)
            return process.returncode, log.read()

    def show_worker_log(self, log: str, failed: bool) -> None:
        """Show the workers' warnings; Django's per-task lines only when something broke."""
        lines = log.splitlines()
        if not failed:
            # With DEBUG on, Django logs every task start and finish at INFO.
            lines = [line for line in lines if not line.startswith("Task id=")]
        if lines:
            self.stderr.write("Worker output:\n" + "\n".join(lines[-50:]))

    def summarise(self, elapsed: float) -> int:
        jobs = Job.objects.filter(task_name__startswith=TASK_PREFIX)
        by_state = dict(jobs.order_by().values_list("state").annotate(n=Count("id")))
        total = sum(by_state.values())
        finished = sum(by_state.get(state, 0) for state in FINISHED)
        write = self.stdout.write

        write("")
        write(f"{'state':<14}{'jobs':>6}")
        for state in JobState:
            if by_state.get(state):
                write(f"{state.value:<14}{by_state[state]:>6}")
        write(f"{'total':<14}{total:>6}")

        write("")
        write(f"{'task':<18}{'jobs':>6}{'attempts':>10}{'retried':>9}{'succeeded':>11}")
        rows = (
            jobs.values("task_name")
            .annotate(
                jobs=Count("id"),
                attempts_used=Sum("attempts"),
                retried=Count("id", filter=Q(attempts__gt=1)),
                succeeded=Count("id", filter=Q(state=JobState.SUCCEEDED)),
            )
            .order_by("task_name")
        )
        for row in rows:
            write(
                f"{row['task_name'].removeprefix(TASK_PREFIX):<18}{row['jobs']:>6}"
                f"{row['attempts_used']:>10}{row['retried']:>9}{row['succeeded']:>11}"
            )
        attempts_used = jobs.aggregate(n=Sum("attempts"))["n"] or 0
        retried = jobs.filter(attempts__gt=1).count()
        write(f"{'all':<18}{total:>6}{attempts_used:>10}{retried:>9}")

        write("")
        for job in jobs.filter(state=JobState.EXHAUSTED).order_by("enqueued_at"):
            call = f"{job.task_name.removeprefix(TASK_PREFIX)}({', '.join(map(repr, job.args))})"
            write(
                f"Exhausted: {call} job {job.id} "
                f"after {job.attempts} of {job.max_attempts} attempts"
            )
            write(f"  last error: {job.last_error}")
        # A receipt whose charge exhausted waits for it, by design: it runs if
        # an operator retries the charge and it succeeds.
        held = jobs.filter(state=JobState.WAITING, dependencies__depends_on__state__in=FINISHED)
        for job in held.order_by("enqueued_at"):
            call = f"{job.task_name.removeprefix(TASK_PREFIX)}({', '.join(map(repr, job.args))})"
            write(
                f"Waiting: {call} job {job.id} for a job that did not succeed; "
                "retry that one (admin, or manage.py jobs retry) and this one runs after it."
            )
        unfinished = jobs.exclude(state__in=FINISHED).exclude(id__in=held.values("id"))
        for job in unfinished[:10]:
            write(f"Unfinished: {job}")
        if unfinished.count() > 10:
            write(f"... and {unfinished.count() - 10} more unfinished.")

        rate = finished / elapsed if elapsed > 0 else 0.0
        write(f"\n{finished} of {total} jobs finished in {elapsed:.1f}s ({rate:.1f} jobs/s).")
        return unfinished.count()
