"""What each index costs a drained job: W2 drains with one index dropped, against all of them.

A job's row is written three times (enqueued, claimed, ended) and its attempt
twice (claimed, ended). An update that changes an indexed column, or a column
of an index's predicate, is not HOT: the new row version enters every index
whose predicate it meets. So every index a running or finished job meets costs
each job an index entry or two, and this measures how much, by draining the
same no-op jobs with the index in place and with it dropped, turn about.

Per case it reports the drain rate (``benchmarks.drain``), the CPU per job of
the workers (the ``runworkers`` process tree, from ``getrusage``) and of the
backends serving the benchmark database and the WAL per job (both by W2's own
meter, ``benchmarks.cost.CostMeter``), and the share of the job and attempt
tables' updates that were HOT. Run it on a quiet machine.
Each dropped index is made again from its own definition before the next case.
Run from the repository root, with the benchmark virtualenv:

    benchmarks/.venv/bin/python -m benchmarks.index_cost --rounds 4 \\
        --index django_jobs_recent_idx --index django_jobs_attempt_ended_idx

Not a test and not a recommendation: every index here serves a query of the
claim, the lifeline, the admin or the dashboard (see each one's comment in
``django_jobs/models.py``); this says what that query costs the hot path.
"""

from __future__ import annotations

import argparse
import resource
import shlex
import statistics

from benchmarks import drain, pg
from benchmarks.cost import CostMeter
from benchmarks.run import at_least_one

TABLES = ("django_jobs_job", "django_jobs_attempt")
_FORMATS = {"jobs/s": ",.0f", "WAL bytes/job": ",.0f", "job HOT %": ".0f", "attempt HOT %": ".0f"}


def updates(db: str) -> dict[str, tuple[int, int]]:
    """(updates, HOT updates) per table, as a new session's statistics have them now."""
    rows = pg.execute(
        db,
        "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = ANY(%s)",
        [list(TABLES)],
    )
    return {name: (updated, hot) for name, updated, hot in rows}


def definition(db: str, index: str) -> str:
    found = pg.scalar(db, "SELECT indexdef FROM pg_indexes WHERE indexname = %s", [index])
    if found is None:
        raise SystemExit(f"no index named {index!r} in the benchmark database")
    return str(found)


def measure(db: str, args: list[str], jobs: int) -> dict[str, float]:
    drain.queue_jobs(jobs)
    children, before = resource.getrusage(resource.RUSAGE_CHILDREN), updates(db)
    with CostMeter(db, roots=[]) as meter:
        rate = drain.drain(args)
    cost = meter.result(jobs)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    worker = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    result = {
        "jobs/s": rate,
        "server ms/job": cost["server_cpu_ms_per_job"],
        "worker ms/job": 1000 * worker / jobs,
        "WAL bytes/job": cost["wal_bytes_per_job"],
    }
    for table, (updated, hot) in updates(db).items():
        updated -= before.get(table, (0, 0))[0]
        hot -= before.get(table, (0, 0))[1]
        result[f"{table.removeprefix('django_jobs_')} HOT %"] = (
            100 * hot / updated if updated else 0.0
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--index", action="append", required=True, help="an index to drop (repeatable)"
    )
    parser.add_argument("--jobs", type=at_least_one, default=30000)
    parser.add_argument("--rounds", type=at_least_one, default=3)
    parser.add_argument("--workers", default="-p 2 -c 64", help="runworkers arguments (W2 best)")
    options = parser.parse_args()
    drain.setup_django()
    drain.ensure_database()
    from django.db import connection

    db = connection.settings_dict["NAME"]
    args = shlex.split(options.workers)
    for index in options.index:
        # "CREATE [UNIQUE] INDEX name ON ...", made again only where missing.
        make = definition(db, index).replace(" INDEX ", " INDEX IF NOT EXISTS ", 1)
        setups = {"with it": make, "dropped": f"DROP INDEX IF EXISTS {index}"}
        results: dict[str, list[dict[str, float]]] = {case: [] for case in setups}
        try:
            for round_ in range(options.rounds):
                order = list(setups) if round_ % 2 == 0 else list(setups)[::-1]
                for case in order:
                    pg.execute(db, setups[case])
                    results[case].append(measure(db, args, options.jobs))
        finally:
            pg.execute(db, make)
        print(
            f"\n{index} ({options.rounds} rounds of {options.jobs:,} jobs, "
            f"{options.workers}), medians:"
        )
        for case, runs in results.items():
            medians = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
            print(
                f"  {case:<8} "
                + "  ".join(
                    f"{key} {value:{_FORMATS.get(key, '.3f')}}" for key, value in medians.items()
                )
            )
        pairs = zip(results["with it"], results["dropped"], strict=True)
        ratios = [dropped["server ms/job"] / kept["server ms/job"] for kept, dropped in pairs]
        print(
            "  server CPU dropped / with it, round by round: "
            + ", ".join(f"{ratio:.2f}" for ratio in ratios)
        )


if __name__ == "__main__":
    main()
