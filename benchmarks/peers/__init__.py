"""The peers, by name: each adapter lives in its own module here."""

from __future__ import annotations

from importlib import import_module

from benchmarks.peers.base import Peer

# name -> "module:Class"; modules are imported only when that peer runs.
ADAPTERS = {
    "django-jobs": "benchmarks.peers.django_jobs:DjangoJobs",
    "procrastinate": "benchmarks.peers.procrastinate:Procrastinate",
    "django-tasks-db": "benchmarks.peers.django_tasks_db:DjangoTasksDb",
    "django-ox": "benchmarks.peers.django_ox:DjangoOx",
    "django-q2": "benchmarks.peers.django_q2:DjangoQ2",
    "celery": "benchmarks.peers.celery:CeleryRedis",
    "pgqueuer": "benchmarks.peers.pgqueuer:PgQueuer",
}


def load(name: str) -> type[Peer]:
    module, _, cls = ADAPTERS[name].partition(":")
    peer: type[Peer] = getattr(import_module(module), cls)
    return peer
