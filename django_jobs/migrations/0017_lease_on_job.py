from datetime import timedelta
from typing import Any

from django.db import migrations, models
from django.db.models import OuterRef, Subquery
from django.utils import timezone

# Workers of the version before this one must be stopped before it runs: they
# write lease rows, and the lease table is gone after it (CHANGELOG.md).


def copy_leases_to_jobs(apps: Any, schema_editor: Any) -> None:
    """Each running job takes its holder from its lease row, so no lease is lost in the move.

    The lease was taken at ``acquired_at``; from here its worker's heartbeat
    keeps it.
    """
    db = schema_editor.connection.alias
    Job = apps.get_model("django_jobs", "Job")
    Lease = apps.get_model("django_jobs", "Lease")
    lease = Lease.objects.using(db).filter(job_id=OuterRef("pk"), token=OuterRef("attempts"))
    Job.objects.using(db).filter(
        pk__in=Lease.objects.using(db).values("job_id"), state__in=["running", "cancelling"]
    ).update(
        leased_by=Subquery(lease.values("worker_id")[:1]),
        leased_at=Subquery(lease.values("acquired_at")[:1]),
    )


def copy_jobs_to_leases(apps: Any, schema_editor: Any) -> None:
    """A lease row for each leased job, as the claim of the version before wrote it.

    It expires after the default LEASE_SECONDS (10 s), renewed from then on by
    the heartbeats of that version's workers.
    """
    db = schema_editor.connection.alias
    Job = apps.get_model("django_jobs", "Job")
    Attempt = apps.get_model("django_jobs", "Attempt")
    Lease = apps.get_model("django_jobs", "Lease")
    now = timezone.now()
    leased = Job.objects.using(db).filter(
        leased_by__isnull=False, state__in=["running", "cancelling"]
    )
    attempts = {
        (a.job_id, a.number): a.pk
        for a in Attempt.objects.using(db).filter(job__in=leased, outcome="running")
    }
    Lease.objects.using(db).bulk_create(
        [
            Lease(
                job_id=job.pk,
                attempt_id=attempts[(job.pk, job.attempts)],
                token=job.attempts,
                worker_id=job.leased_by,
                acquired_at=job.leased_at or now,
                renewed_at=now,
                expires_at=now + timedelta(seconds=10),
            )
            for job in leased.only("id", "attempts", "leased_by", "leased_at")
            if (job.pk, job.attempts) in attempts
        ],
        batch_size=1000,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0016_operator_verbs"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="leased_by",
            field=models.UUIDField(
                blank=True,
                editable=False,
                help_text="The worker whose attempt holds the lease; empty when not running.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="leased_at",
            field=models.DateTimeField(
                blank=True,
                editable=False,
                help_text="When the current lease was taken.",
                null=True,
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state__in", ["running", "cancelling"])),
                fields=["leased_by"],
                name="django_jobs_holder_idx",
            ),
        ),
        migrations.RunPython(copy_leases_to_jobs, copy_jobs_to_leases),
        migrations.RemoveIndex(
            model_name="lease",
            name="django_jobs_lease_expiry_idx",
        ),
        migrations.RemoveIndex(
            model_name="lease",
            name="django_jobs_lease_worker_idx",
        ),
        migrations.DeleteModel(
            name="Lease",
        ),
    ]
