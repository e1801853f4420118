"""W6, overload: more work offered than the workers drain, with autovacuum off and on.

For each peer, in its own driver process and database: the drain capacity
(W2, best setting), then ``--factor`` x that rate offered in bulk batches for
``--seconds``, the completions, backlog and dead tuples read every window
(``workloads.w6_overload``). The capacity is the median of three drains; the
first window, while the workers start, is shown in brackets and not judged.
W2's drains count the workers' start-up and the windows do not, so the
windows are also judged against the steady drain rate: workers on a
backlog with nothing offered, one window counted after the same warm-up.
A queue that keeps its promise completes about its capacity in every window
however large the backlog grows; one whose statements slow down with dead
tuples does not.

Run from the repository root (it uses benchmarks/.venv, which
``python -m benchmarks.run`` builds, for the peers):

    python -m benchmarks.overload --seconds 300 --only django-jobs,pgqueuer,procrastinate

``--autovacuum off,on`` (the default) runs everything once with the server's
autovacuum off and once on at PostgreSQL's default settings: it is switched
with ``ALTER SYSTEM`` (the role needs to be a superuser) and put back as it
was at the end. Results go to benchmarks/results/overload-latest.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.run import ROOT, ensure_venv, venv_python

RESULTS = ROOT / "benchmarks" / "results"


def set_autovacuum(value: str | None) -> None:
    """``on``/``off`` for the whole server, or None for the configuration file's value."""
    from benchmarks import pg  # psycopg: in benchmarks/.venv

    with pg.connect("postgres") as conn:
        if value is None:
            conn.execute("ALTER SYSTEM RESET autovacuum")
        else:
            conn.execute(f"ALTER SYSTEM SET autovacuum = {'on' if value == 'on' else 'off'}")
        conn.execute("SELECT pg_reload_conf()")
    time.sleep(1)  # the postmaster rereads it asynchronously


def run_workload(
    peer: str, workload: str, args: list[str], timeout: float, log: Path
) -> dict[str, Any]:
    """One workload for one peer, in a driver process of its own on a fresh database."""
    db = f"bench_{workload}_{peer.replace('-', '_')}"
    argv = [sys.executable, "-m", "benchmarks.driver", "--peer", peer, "--db", db]
    argv += ["--create-db", "--only", workload, *args]
    with log.open("w") as stderr:
        done = subprocess.run(
            argv,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            timeout=timeout,
        )
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return {"error": log.read_text(errors="replace")[-1500:]}
    result: dict[str, Any] = json.loads(lines[-1])
    if result["errors"]:
        return {"error": result["errors"]}
    found: dict[str, Any] = result[workload]
    return found


def run_peer(peer: str, seconds: float, log: Path) -> dict[str, Any]:
    return run_workload(peer, "w6", ["--overload-seconds", str(seconds)], seconds + 1800, log)


def markdown(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    out = []
    for mode, peers in results.items():
        out.append(f"### Autovacuum {mode}\n")
        out.append(
            "| peer | capacity jobs/s | steady drain jobs/s | offered jobs/s | "
            "median completed/s | lowest window | lowest / capacity | lowest / steady | "
            "backlog at end | dead tuples at end |"
        )
        out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
        for peer, w6 in peers.items():
            if "error" in w6:
                out.append(f"| {peer} | failed: see the JSON | | | | | | | | |")
                continue
            dead = ", ".join(f"{t} {n:,}" for t, n in w6["windows"][-1]["dead_tuples"].items())
            out.append(
                f"| {peer} | {w6['capacity_jobs_s']:,.0f} | {w6['steady_capacity_jobs_s']:,.0f} | "
                f"{w6['offered_jobs_s']:,.0f} | "
                f"{w6['median_completed_s']:,.0f} | {w6['min_completed_s']:,.0f} | "
                f"{w6['min_ratio']:.2f} | {w6['steady_min_ratio']:.2f} | "
                f"{w6['final_backlog']:,} | {dead} |"
            )
        out.append("")
        for peer, w6 in peers.items():
            if "error" in w6:
                continue
            runs = " · ".join(f"{c:,.0f}" for c in w6["capacity_runs_jobs_s"])
            rates = " ".join(
                f"({w['completed_s']:,.0f})" if w["warmup"] else f"{w['completed_s']:,.0f}"
                for w in w6["windows"]
            )
            dead = " ".join(f"{sum(w['dead_tuples'].values()):,}" for w in w6["windows"])
            steady = " · ".join(f"{c:,.0f}" for c in w6["steady_runs_jobs_s"])
            out.append(f"- {peer}, capacity drains (jobs/s): {runs}")
            out.append(f"- {peer}, steady drains after the warm-up (jobs/s): {steady}")
            out.append(f"- {peer}, completed/s per window (warm-up in brackets): {rates}")
            out.append(f"- {peer}, dead tuples of its tables per window: {dead}")
            producer = " ".join(f"{w['producer_cores']:.2f}" for w in w6["windows"])
            busy = " ".join(f"{w['machine_busy']:.0%}" for w in w6["windows"])
            out.append(f"- {peer}, cores the producer used per window: {producer}")
            out.append(f"- {peer}, machine busy per window: {busy}")
        out.append("")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--only", default="django-jobs,pgqueuer,procrastinate")
    parser.add_argument("--autovacuum", default="off,on")
    parser.add_argument("--no-venv", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if not options.no_venv:  # again, on benchmarks/.venv's Python, which has the peers
        ensure_venv()
        argv = [str(venv_python()), "-m", "benchmarks.overload", *sys.argv[1:], "--no-venv"]
        os.execve(argv[0], argv, {**os.environ, "PYTHONPATH": str(ROOT)})

    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results: dict[str, dict[str, dict[str, Any]]] = {}
    try:
        for mode in options.autovacuum.split(","):
            set_autovacuum(mode)
            for peer in options.only.split(","):
                log = RESULTS / f"overload-{stamp}-{mode}-{peer}.log"
                print(f"overload: autovacuum {mode}, {peer}", flush=True)
                results.setdefault(mode, {})[peer] = run_peer(peer, options.seconds, log)
                log.unlink(missing_ok=True)
    finally:
        set_autovacuum(None)
    (RESULTS / "overload-latest.json").write_text(
        json.dumps({"seconds": options.seconds, "at": stamp, "results": results}, indent=2)
    )
    table = markdown(results)
    (RESULTS / "overload-latest.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
