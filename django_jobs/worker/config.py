"""What ``runworkers`` tells each worker process; plain data, so a fork or a test can pass it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    backend: str = "default"
    queues: tuple[str, ...] = ()  # empty: every queue of the backend
    concurrency: int = 16
    burst: bool = False  # exit once no job of our queues is queued or running
    max_jobs: int | None = None  # recycle the process after this many jobs
    max_memory_mb: int | None = None  # ... or once its RSS grows past this
