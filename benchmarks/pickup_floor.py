"""W3 against its floor: what one round trip costs a connection that has been idle.

W3 enqueues a probe every half second to an idle worker and times its pickup
from the enqueue's commit. Between probes every process on the path sleeps:
the worker's threads, its server backends, the disk. The enqueue's commit
wakes the server; the worker's connection then makes its first round trip in
half a second. This times that round trip, on the benchmark database: after
the same idle gap, a commit on another connection (as the enqueue's), then
the call, timed; next to the same calls made back to back:

* ``SELECT 1``: a round trip that writes nothing;
* a one-row ``INSERT`` in autocommit: a round trip and a durable commit, the
  least a claim costs (a claim that did not survive a crash of the server
  could let a second worker run the job while the first still does);
* the same with ``synchronous_commit = off``: the commit not waited for, to
  show what waiting for it costs;
* django-jobs' claim of the one queued job, as an idle worker sends it (one
  prepared statement, in autocommit: ``Engine.claim``).

Cases take turns call by call; each row gives the median in microseconds.
Run with the benchmark virtualenv:

    benchmarks/.venv/bin/python -m benchmarks.pickup_floor --calls 20
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
import uuid
from collections.abc import Callable

import psycopg

from benchmarks import pg
from benchmarks.drain import no_jobs

W3_GAP = 0.5  # benchmarks.workloads.Sizes.probe_gap


Case = tuple[Callable[[], object], Callable[[], object]]  # (ready it, the call)


def _nothing() -> None:
    return None


def raw_cases(db: str) -> tuple[dict[str, Case], Callable[[], object]]:
    """The calls on connections of their own, and the enqueuer's commit on another."""
    durable, lazy, enqueuer = (psycopg.connect(pg.dsn(db), autocommit=True) for _ in range(3))
    durable.execute("CREATE TABLE IF NOT EXISTS pickup_floor (id bigserial PRIMARY KEY, v text)")
    lazy.execute("SET synchronous_commit = off")
    insert = "INSERT INTO pickup_floor (v) VALUES (%s)"
    cases: dict[str, Case] = {
        "SELECT 1": (_nothing, lambda: durable.execute("SELECT 1", prepare=True)),
        "INSERT, autocommit": (_nothing, lambda: durable.execute(insert, ["x"], prepare=True)),
        "INSERT, autocommit, synchronous_commit off": (
            _nothing,
            lambda: lazy.execute(insert, ["x"], prepare=True),
        ),
    }
    return cases, lambda: enqueuer.execute(insert, ["enqueued"], prepare=True)


def claim_case() -> Case:
    """The claim as an idle worker makes it, readied by enqueuing the job it takes."""
    from benchmarks.benchapp.tasks import noop
    from django_jobs.backend import jobs_backend
    from django_jobs.values import WorkerIdentity

    engine = jobs_backend("default").engine
    worker = WorkerIdentity(id=uuid.uuid4(), name=f"{socket.gethostname()}:{os.getpid()}")
    queues = (noop.queue_name,)
    engine.register_worker(worker, "default", socket.gethostname(), os.getpid(), queues, 16)

    def claim() -> object:
        got = engine.claim(worker, queues, 16, 0)
        assert len(got) == 1, got
        return got

    return noop.enqueue, claim


def timed(case: Case, gap: float, wake: Callable[[], object]) -> float:
    """The call's time after ``gap`` seconds of idleness that a commit elsewhere ended.

    Back to back (no gap), the call is made once before, untimed, so that the
    timed one finds everything awake.
    """
    ready, call = case
    if not gap:
        ready()
        call()
    ready()
    time.sleep(gap)
    wake()
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--gap", type=float, default=W3_GAP, help="idle seconds before a call")
    options = parser.parse_args()
    no_jobs()
    from django.db import connection

    db = connection.settings_dict["NAME"]
    cases, wake = raw_cases(db)
    cases["django-jobs claim of one job, autocommit"] = claim_case()
    gaps = {"back to back": 0.0, "idle": options.gap}
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(options.calls):
        for gap_name, gap in gaps.items():
            for name, case in cases.items():
                times.setdefault((name, gap_name), []).append(timed(case, gap, wake))
    # The jobs, their attempts and the worker the claims were made as.
    pg.execute(db, "TRUNCATE django_jobs_job, django_jobs_worker CASCADE")
    pg.execute(db, "DROP TABLE IF EXISTS pickup_floor")
    print(f"\n{'case':<46} {'back to back µs':>16} {f'{options.gap:g} s idle µs':>16}")
    for name in cases:
        busy = statistics.median(times[(name, "back to back")])
        idle = statistics.median(times[(name, "idle")])
        print(f"{name:<46} {busy:>16,.0f} {idle:>16,.0f}")


if __name__ == "__main__":
    main()
