from __future__ import annotations

import os
from typing import Any

from django.apps import AppConfig


def _ignore(**kwargs: Any) -> None:
    """What a metrics or audit integration connects, minus its work."""


class BenchAppConfig(AppConfig):
    name = "benchmarks.benchapp"

    def ready(self) -> None:
        # benchmarks.drain --with-receiver: every worker process connects one
        # catch-all receiver, to measure what connecting one costs.
        if os.environ.get("BENCH_TRANSITION_RECEIVER"):
            from django_jobs.signals import job_transitioned

            job_transitioned.connect(_ignore, weak=False)
