"""The subcommands of ``manage.py jobs``, one module per kind of work.

Each module declares its subcommands' arguments and the function that runs
them (``base.AddSubcommand``); the command in ``management/commands/jobs.py``
only assembles them. Every write goes through ``django_jobs.control``
(operator verbs), the backend (enqueue) or ``django_jobs.retention`` (prune).
"""
