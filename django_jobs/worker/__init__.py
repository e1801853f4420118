"""The worker process, in parts the way Oban and River split theirs.

* ``producer``: the claim loop, its wake-ups, recycling and the shutdown grace;
* ``executor`` (with ``runner``): runs one attempt in a job thread, or a
  suspect in a child process (``django_jobs.isolation``), and returns its
  ``Outcome``, never touching the database itself;
* ``watchdog``: stops attempts past their timeout or cancel grace;
* ``completer``: writes each outcome with exactly one engine call, batched,
  and keeps what the database could not take yet;
* ``lifeline``: the heartbeat thread (leases, progress, cancels, the reaper);
* ``process``: wires them into one ``Worker`` around the ``running`` attempts.
"""

from .config import WorkerConfig
from .process import Worker, run_worker
from .producer import RECYCLE_EXIT_CODE, rss_mb

__all__ = ["RECYCLE_EXIT_CODE", "Worker", "WorkerConfig", "rss_mb", "run_worker"]
