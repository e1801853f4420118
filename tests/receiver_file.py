"""Worker processes started by tests connect these receivers to Django's task signals.

Each call is written to a file as a JSON line: which signal, for which job,
in which thread, and the job's state as that thread's own database connection
reads it. A job whose first argument names a signal ("raise in started",
"raise in finished") makes that receiver raise, as a broken receiver would.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any


def connect(path: str) -> None:
    from django_jobs.framework import task_finished, task_started

    def recorder(name: str) -> Any:
        def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
            from django_jobs.models import Job

            line = {
                "signal": name,
                "job_id": task_result.id,
                "status": str(task_result.status),
                "thread": threading.current_thread().name,
                "state_in_db": Job.objects.get(id=task_result.id).state,
            }
            with Path(path).open("a") as file:
                file.write(json.dumps(line) + "\n")
            if task_result.args[:1] == [f"raise in {name}"]:
                raise RuntimeError(f"a broken {name} receiver")

        return receive

    task_started.connect(recorder("started"), weak=False)
    task_finished.connect(recorder("finished"), weak=False)
