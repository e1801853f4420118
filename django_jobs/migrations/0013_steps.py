import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0012_trace_context"),
    ]

    operations = [
        migrations.AlterField(
            model_name="attempt",
            name="outcome",
            field=models.CharField(
                choices=[
                    ("running", "Running"),
                    ("succeeded", "Succeeded"),
                    ("failed", "Failed"),
                    ("timed_out", "Timed out"),
                    ("lost", "Lost"),
                    ("cancelled", "Cancelled"),
                    ("slept", "Slept"),
                ],
                default="running",
                max_length=16,
            ),
        ),
        migrations.CreateModel(
            name="Step",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=200)),
                (
                    "attempt",
                    models.PositiveIntegerField(
                        help_text="The attempt that ran it and recorded it."
                    ),
                ),
                ("result", models.JSONField(blank=True, null=True)),
                ("recorded_at", models.DateTimeField()),
                (
                    "job",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="steps",
                        to="django_jobs.job",
                    ),
                ),
            ],
            options={
                "ordering": ["job", "id"],
                "constraints": [
                    models.UniqueConstraint(fields=("job", "name"), name="django_jobs_step_uniq")
                ],
            },
        ),
    ]
