"""The admin as a repair console: jobs, their history and the operator verbs; workers.

One concept per module: ``jobs`` (list and job page), ``actions`` (the verbs),
``dashboard``, ``workers``, and the pieces that keep the list fast on a large
table (``filters``, ``pagination``). Importing this package registers
``Job`` and ``Worker`` with the default admin site, as Django's admin
autodiscovery expects.
"""

from .jobs import JobAdmin
from .schedules import ScheduleAdmin
from .workers import WorkerAdmin

__all__ = ["JobAdmin", "ScheduleAdmin", "WorkerAdmin"]
