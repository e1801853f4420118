"""Run the workloads for one peer, in this process, and print one JSON object.

The orchestrator (``benchmarks.run``) starts one driver per peer and run,
because Django can be set up only once per process. By hand:

    benchmarks/.venv/bin/python -m benchmarks.driver --peer django-jobs --db bench_x --smoke

The database must exist (``--create-db`` makes and drops it).
"""

from __future__ import annotations

import argparse
import compileall
import dataclasses
import json
import os
import re
import sys
import time
import traceback
from typing import Any

from benchmarks import pg, workloads
from benchmarks.peers import ADAPTERS, load
from benchmarks.run import BENCH, ROOT, at_least_one


def compile_sources() -> None:
    """Write the bytecode of our sources, as installing a wheel does.

    The peers come from wheels, whose bytecode pip writes at install; ours is
    installed editable, so where ``PYTHONDONTWRITEBYTECODE`` is set (this
    harness's hosts) every worker compiled django_jobs from source at start,
    60-70 ms of W2's start-up that no user's install pays. The peers'
    virtualenv (benchmarks/.venv) is left out: pip compiled it, and walking
    it took 0.7 s of every driver's start.
    """
    compileall.compile_dir(ROOT / "django_jobs", quiet=1)
    compileall.compile_dir(BENCH, quiet=1, rx=re.compile(r"[/\\]\.venv[/\\]"))


def run_peer(name: str, db: str, sizes: workloads.Sizes, only: list[str]) -> dict[str, Any]:
    peer = load(name)(db)
    os.environ.update(peer.worker_env())
    if peer.django_settings:
        import django

        django.setup()
    out: dict[str, Any] = {"peer": name, "versions": peer.versions(), "errors": {}}
    out["settings"] = {k: v.description for k, v in peer.settings().items()}
    peer.setup_db()
    try:
        for key in only:
            started = time.monotonic()
            for attempt in (1, 2):
                try:
                    out[key] = workloads.ALL[key](peer, sizes)
                    out["errors"].pop(key, None)
                    break
                except Exception as exc:  # one workload failing must not hide the others
                    out["errors"][key] = f"{type(exc).__name__}: {exc}"[:2000]
                    traceback.print_exc()
                    if attempt == 1 and "OperationalError" in type(exc).__name__:
                        # The server went away (a restart on a shared machine): once more.
                        out.setdefault("retried", []).append(key)
                        _reconnect(peer)
                        time.sleep(3)
                        continue
                    break
            print(f"{name} {key}: {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
    finally:
        peer.teardown()
    return out


def _reconnect(peer: Any) -> None:
    if peer.django_settings:
        from django.db import connections

        connections.close_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--peer", required=True, choices=sorted(ADAPTERS))
    parser.add_argument("--db", required=True)
    parser.add_argument("--create-db", action="store_true")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true")
    size.add_argument("--smoke", action="store_true")
    parser.add_argument("--only", default="w1,w2,w3,w4")
    parser.add_argument(
        "--overload-seconds", type=float, help="W6: how long to offer more than capacity"
    )
    parser.add_argument(
        "--backlog", type=at_least_one, help="W4: finished jobs already in the table"
    )
    parser.add_argument("--pressure-pin", choices=["idle", "readers"], help="W7: what pins")
    parser.add_argument("--pressure-phases", help="W7: clean,pinned,recovery seconds")
    parser.add_argument("--pressure-rate", type=float, help="W7: jobs/s offered")
    options = parser.parse_args()
    compile_sources()
    sizes = (
        workloads.SMOKE
        if options.smoke
        else workloads.QUICK
        if options.quick
        else workloads.Sizes()
    )
    if options.overload_seconds is not None:
        sizes = dataclasses.replace(sizes, overload_seconds=options.overload_seconds)
    if options.backlog is not None:
        sizes = dataclasses.replace(sizes, backlog=options.backlog)
    if options.pressure_pin is not None:
        sizes = dataclasses.replace(sizes, pressure_pin=options.pressure_pin)
    if options.pressure_phases is not None:
        clean, pinned, recovery = (float(s) for s in options.pressure_phases.split(","))
        sizes = dataclasses.replace(sizes, pressure_phases=(clean, pinned, recovery))
    if options.pressure_rate is not None:
        sizes = dataclasses.replace(sizes, pressure_rate=options.pressure_rate)
    if options.create_db:
        pg.create_database(options.db)
    try:
        result = run_peer(options.peer, options.db, sizes, options.only.split(","))
    finally:
        if options.create_db:
            pg.drop_database(options.db)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
