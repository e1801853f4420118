from django.db import models


class Ledger(models.Model):
    """One row per job that ran to its side effect; the unique key exposes double runs."""

    job_key = models.CharField(max_length=64, unique=True)
    attempt = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.job_key} (attempt {self.attempt})"


class Order(models.Model):
    """Business data a test enqueues jobs next to."""

    number = models.CharField(max_length=20, unique=True)

    def __str__(self) -> str:
        return self.number


class Probe(models.Model):
    """When a job ran, to find overlaps that concurrency limits must prevent."""

    job_id = models.UUIDField()
    key = models.CharField(max_length=50, blank=True, default="")
    started = models.FloatField()
    ended = models.FloatField()

    def __str__(self) -> str:
        return f"{self.job_id} {self.started:.3f}-{self.ended:.3f}"
