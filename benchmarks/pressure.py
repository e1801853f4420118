"""W7, pressure: a steady load while something pins the vacuum horizon.

For each peer, in its own driver process and database, the best setting runs
while ``--rate`` jobs/s are offered in small bulk batches through three
phases — clean, the horizon pinned, recovery (``--phases`` seconds, 60, 120
and 60 by default) — with a pickup probe every quarter second
(``workloads.w7_pressure``). ``--pin idle`` holds the horizon with one
connection idle in a transaction that took an xid; ``--pin readers`` with
four ``REPEATABLE READ`` transactions scanning the peer's tables. Per phase:
the completions against the offer (kept), pickup p50/p99, dead tuples of
each table at the phase's end. The recovery is reported as its first 30 s
("recovering") and the rest ("recovered"): issue 17 asks for the clean
figures back within 30 s of the pin's end. Results from before 2026-12-06
have one "recovery" row for the whole phase.

Run from the repository root (peers come from benchmarks/.venv):

    python -m benchmarks.pressure --only django-jobs,pgqueuer,procrastinate --pin idle,readers

``--autovacuum`` as in ``benchmarks.overload`` (default: on, as production
runs). Results go to benchmarks/results/pressure-latest.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from benchmarks.overload import RESULTS, run_workload, set_autovacuum
from benchmarks.run import ROOT, ensure_venv, venv_python

Results = dict[str, dict[str, dict[str, list[dict[str, Any]]]]]


def markdown(results: Results) -> str:
    out = []
    for mode, pins in results.items():
        for pin, peers in pins.items():
            out.append(f"### Autovacuum {mode}, horizon pinned by: {pin}\n")
            out.append(
                "| peer | phase | kept (median) | pickup p50 ms | pickup p99 ms | "
                "backlog at end | dead tuples at end |"
            )
            out.append("| --- | --- | ---: | ---: | ---: | ---: | --- |")
            for peer, runs in peers.items():
                good = [run for run in runs if "error" not in run]
                if not good:
                    out.append(f"| {peer} | failed: see the JSON | | | | | |")
                    continue
                # The phases as the runs recorded them (older runs: one "recovery").
                for phase in [name for name, part in good[0].items() if isinstance(part, dict)]:
                    rows = [run[phase] for run in good]
                    last = rows[-1]
                    dead = ", ".join(f"{t} {n:,}" for t, n in last["dead_tuples_end"].items())
                    out.append(
                        f"| {peer} | {phase} | {_median(r['kept'] for r in rows):.2f} | "
                        f"{_fmt(_median(r['pickup_p50_ms'] for r in rows))} | "
                        f"{_fmt(_median(r['pickup_p99_ms'] for r in rows))} | "
                        f"{last['backlog_end']:,} | {dead} |"
                    )
            out.append("")
    return "\n".join(out)


def _median(values: Any) -> float | None:
    known = sorted(v for v in values if v is not None)
    if not known:
        return None
    middle = len(known) // 2
    return known[middle] if len(known) % 2 else (known[middle - 1] + known[middle]) / 2


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", default="django-jobs,pgqueuer,procrastinate")
    parser.add_argument("--pin", default="idle,readers")
    parser.add_argument("--phases", default="60,120,60")
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--autovacuum", default="on")
    parser.add_argument("--no-venv", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if not options.no_venv:  # again, on benchmarks/.venv's Python, which has the peers
        ensure_venv()
        argv = [str(venv_python()), "-m", "benchmarks.pressure", *sys.argv[1:], "--no-venv"]
        os.execve(argv[0], argv, {**os.environ, "PYTHONPATH": str(ROOT)})

    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    seconds = sum(float(s) for s in options.phases.split(","))
    results: Results = {}
    try:
        for mode in options.autovacuum.split(","):
            set_autovacuum(mode)
            for run in range(1, options.runs + 1):  # interleaved: drift hits every peer alike
                for pin in options.pin.split(","):
                    for peer in options.only.split(","):
                        log = RESULTS / f"pressure-{stamp}-{mode}-{pin}-{peer}-{run}.log"
                        print(f"pressure: autovacuum {mode}, {pin}, {peer}, run {run}", flush=True)
                        args = ["--pressure-pin", pin, "--pressure-phases", options.phases]
                        args += ["--pressure-rate", str(options.rate)]
                        found = run_workload(peer, "w7", args, seconds + 1800, log)
                        results.setdefault(mode, {}).setdefault(pin, {}).setdefault(
                            peer, []
                        ).append(found)
                        log.unlink(missing_ok=True)
    finally:
        set_autovacuum(None)
    summary = {"phases": options.phases, "rate": options.rate, "at": stamp, "results": results}
    (RESULTS / "pressure-latest.json").write_text(json.dumps(summary, indent=2))
    table = markdown(results)
    (RESULTS / "pressure-latest.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
