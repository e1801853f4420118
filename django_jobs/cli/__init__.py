"""The pieces of ``manage.py jobs`` that are not argument parsing.

Reading and formatting live here so they can be tested and reused without
argparse; every write goes through ``django_jobs.control`` (operator verbs),
the backend (enqueue) or ``django_jobs.retention`` (prune).
"""
