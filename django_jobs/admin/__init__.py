"""The admin as a repair console: jobs, their history and the operator verbs.

One concept per module: ``jobs`` (list and job page), ``actions`` (the verbs),
``dashboard`` (with queue pause/resume), ``batches``, ``workers``, ``schedules``,
``queues`` (the pause/resume audit), and the pieces that keep the list fast
on a large table (``filters``, ``pagination``). Importing this package
registers them with the default admin site, as Django's admin autodiscovery
expects.
"""

from .batches import BatchAdmin
from .jobs import JobAdmin
from .queues import QueueEventAdmin
from .schedules import ScheduleAdmin
from .workers import WorkerAdmin

__all__ = ["BatchAdmin", "JobAdmin", "QueueEventAdmin", "ScheduleAdmin", "WorkerAdmin"]
