"""A new customer's welcome: charge the first month, email the receipt, check in a day later."""

from datetime import timedelta

from django_jobs import task
from django_jobs.tasks import JobContext

# Stand-ins for a payment provider and a mailer: each call is an effect in the world.
CHARGES: list[tuple[str, int]] = []
EMAILS: list[tuple[str, str]] = []


def charge(customer: str, cents: int) -> dict[str, str | int]:
    CHARGES.append((customer, cents))
    return {"charge_id": f"ch_{len(CHARGES)}", "cents": cents}


def send_email(to: str, subject: str) -> str:
    EMAILS.append((to, subject))
    return f"msg_{len(EMAILS)}"


@task(takes_context=True, max_attempts=5)
def welcome(context: JobContext, customer: str) -> str:
    # Each step runs once for this job, whatever happens to the attempt after it.
    payment = context.step("charge", charge, customer, 900)
    context.step("receipt", send_email, customer, f"Your receipt {payment['charge_id']}")
    # The job waits a day, queued, holding no worker; the next run starts here.
    context.sleep(timedelta(days=1).total_seconds())
    context.step("check-in", send_email, customer, "How is it going?")
    return str(payment["charge_id"])
