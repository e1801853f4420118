"""Medians of the runs, min-max, same-run ratios, targets, and the markdown table."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

US = "django-jobs"

# metric key -> (label, how to read it from one peer's run result)
METRICS: dict[str, tuple[str, Callable[[dict[str, Any]], float | None]]] = {
    "w1_one_by_one_jobs_s": ("W1 enqueue 1-by-1 jobs/s", lambda r: r["w1"]["one_by_one_jobs_s"]),
    "w1_bulk_jobs_s": ("W1 bulk jobs/s", lambda r: r["w1"]["bulk_jobs_s"]),
    "w2_defaults_jobs_s": ("W2 one process jobs/s", lambda r: r["w2"]["defaults"]["jobs_s"]),
    "w2_best_jobs_s": ("W2 best jobs/s", lambda r: r["w2"]["best"]["jobs_s"]),
    "w3_p50_ms": ("W3 p50 ms", lambda r: r["w3"]["p50_ms"]),
    "w3_p95_ms": ("W3 p95 ms", lambda r: r["w3"]["p95_ms"]),
    "w4_jobs_s": ("W4 backlog jobs/s", lambda r: r["w4"]["jobs_s"]),
    "w5_defaults_mb": ("W5 RSS MB (one proc)", lambda r: r["w2"]["defaults"]["peak_rss_mb"]),
    "w5_best_mb": ("W5 RSS MB (best, largest proc)", lambda r: r["w2"]["best"]["peak_rss_mb"]),
    # Where W2 best's time goes (benchmarks/cost.py): CPU per job on each side.
    "w2_best_worker_cpu_ms": (
        "W2 best worker CPU ms/job",
        lambda r: r["w2"]["best"]["worker_cpu_ms_per_job"],
    ),
    "w2_best_server_cpu_ms": (
        "W2 best PostgreSQL CPU ms/job",
        lambda r: r["w2"]["best"]["server_cpu_ms_per_job"],
    ),
    "w2_best_wal_bytes": ("W2 best WAL bytes/job", lambda r: r["w2"]["best"]["wal_bytes_per_job"]),
}
HIGHER_IS_BETTER = {
    "w3_p50_ms": False,
    "w3_p95_ms": False,
    "w5_defaults_mb": False,
    "w2_best_worker_cpu_ms": False,
    "w2_best_server_cpu_ms": False,
    "w2_best_wal_bytes": False,
}
DJANGO_PG_PEERS = ("procrastinate", "django-tasks-db", "django-ox", "django-q2")


def _read(run: dict[str, Any], key: str) -> float | None:
    try:
        value = METRICS[key][1](run)
    except (KeyError, TypeError):
        return None
    return float(value) if value is not None else None


def _stats(values: list[float]) -> dict[str, Any] | None:
    if not values:
        return None
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "runs": values,
    }


def summarize(runs: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """``runs``: one list of peer results per run. Ratios are taken within a run."""
    peers: dict[str, dict[str, Any]] = {}
    for run in runs:
        for result in run:
            entry = peers.setdefault(
                result["peer"],
                {
                    "versions": result.get("versions", {}),
                    "settings": result.get("settings", {}),
                    "errors": [],
                },
            )
            if result.get("errors"):
                entry["errors"].append(result["errors"])
            for key in METRICS:
                value = _read(result, key)
                if value is not None:
                    entry.setdefault("_values", {}).setdefault(key, []).append(value)
    for entry in peers.values():
        values = entry.pop("_values", {})
        for key in METRICS:
            entry[key] = _stats(values.get(key, []))
    return {"peers": peers, "ratios": _ratios(runs), "targets": _targets(runs)}


def _by_peer(run: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {result["peer"]: result for result in run}


def _same_run(
    runs: list[list[dict[str, Any]]], ours: str, theirs: str, peer: str
) -> dict[str, Any] | None:
    """Median over runs of (our ``ours`` metric / the peer's ``theirs`` metric) in that run."""
    values = []
    for run in runs:
        results = _by_peer(run)
        if US not in results or peer not in results:
            continue
        a, b = _read(results[US], ours), _read(results[peer], theirs)
        if a and b:
            values.append(a / b)
    return _stats(values)


def _ratios(runs: list[list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    peers = sorted({r["peer"] for run in runs for r in run} - {US})
    return {
        peer: {
            key: _same_run(runs, key, key, peer)
            for key in (
                "w1_one_by_one_jobs_s",
                "w1_bulk_jobs_s",
                "w2_defaults_jobs_s",
                "w2_best_jobs_s",
                "w4_jobs_s",
            )
        }
        for peer in peers
    }


def _targets(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The issue's targets, each as measured (median over runs of same-run ratios)."""

    def best_django_pg() -> dict[str, Any] | None:
        values = []
        for run in runs:
            results = _by_peer(run)
            ours = _read(results.get(US, {}), "w2_best_jobs_s")
            theirs = [_read(results[p], "w2_best_jobs_s") for p in DJANGO_PG_PEERS if p in results]
            theirs_ok = [t for t in theirs if t]
            if ours and theirs_ok:
                values.append(ours / max(theirs_ok))
        return _stats(values)

    def own(fn: Callable[[dict[str, Any]], float | None]) -> dict[str, Any] | None:
        values = []
        for run in runs:
            results = _by_peer(run)
            if US in results:
                value = fn(results[US])
                if value is not None:
                    values.append(value)
        return _stats(values)

    def w4_over_w2(r: dict[str, Any]) -> float | None:
        a, b = _read(r, "w4_jobs_s"), _read(r, "w2_best_jobs_s")
        return a / b if a and b else None

    rows = [
        ("W2 best ≥ 2x best Django PG peer", best_django_pg(), 2.0, True),
        (
            "W2 best ≥ 1x Celery+Redis",
            _same_run(runs, "w2_best_jobs_s", "w2_best_jobs_s", "celery"),
            1.0,
            True,
        ),
        (
            "W2 best ≥ 1x PgQueuer",
            _same_run(runs, "w2_best_jobs_s", "w2_best_jobs_s", "pgqueuer"),
            1.0,
            True,
        ),
        (
            "W2 one process ≥ 3x django-ox",
            _same_run(runs, "w2_defaults_jobs_s", "w2_defaults_jobs_s", "django-ox"),
            3.0,
            True,
        ),
        ("W3 p50 ≤ 3 ms", own(lambda r: _read(r, "w3_p50_ms")), 3.0, False),
        ("W4 ≥ 0.9x W2 (best)", own(w4_over_w2), 0.9, True),
        ("bulk W1 ≥ 20,000 jobs/s", own(lambda r: _read(r, "w1_bulk_jobs_s")), 20000.0, True),
        (
            "bulk W1 ≥ 1.5x PgQueuer",
            _same_run(runs, "w1_bulk_jobs_s", "w1_bulk_jobs_s", "pgqueuer"),
            1.5,
            True,
        ),
        ("W5 ≤ 100 MB", own(lambda r: _read(r, "w5_defaults_mb")), 100.0, False),
    ]
    out = []
    for label, measured, goal, higher in rows:
        met = None
        if measured is not None:
            met = measured["median"] >= goal if higher else measured["median"] <= goal
        out.append({"target": label, "goal": goal, "measured": measured, "met": met})
    return out


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def cell(stat: dict[str, Any] | None, empty: str = "—") -> str:
    if stat is None:
        return empty
    if len(stat["runs"]) == 1:
        return _fmt(stat["median"])
    return f"{_fmt(stat['median'])} ({_fmt(stat['min'])}-{_fmt(stat['max'])})"


def to_markdown(summary: dict[str, Any]) -> str:
    peers = summary["peers"]
    order = [US, *sorted(p for p in peers if p != US)] if US in peers else sorted(peers)
    keys = list(METRICS)
    lines = [
        "| peer | " + " | ".join(METRICS[k][0] for k in keys) + " |",
        "| --- | " + " | ".join("---:" for _ in keys) + " |",
    ]
    for name in order:
        entry = peers[name]
        cells = []
        for key in keys:
            workload = "w2" if key.startswith("w5") else key[:2]
            failed = any(workload in errors or "driver" in errors for errors in entry["errors"])
            empty = "failed" if failed else "—"
            if key == "w1_bulk_jobs_s" and entry.get("w1_one_by_one_jobs_s"):
                empty = "no bulk path"
            elif key == "w4_jobs_s" and entry.get("w2_best_jobs_s"):
                empty = "n/a"
            cells.append(cell(entry.get(key), empty))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| peer | version | one process (defaults) | best on 2 cores |",
        "| --- | --- | --- | --- |",
    ]
    for name in order:
        entry = peers[name]
        versions = ", ".join(f"{k} {v}" for k, v in entry["versions"].items())
        settings = entry["settings"]
        lines.append(
            f"| {name} | {versions} | {settings.get('defaults', '')} | {settings.get('best', '')} |"
        )
    ratios = summary["ratios"]
    if ratios:
        lines += [
            "",
            f"Same-run ratios, {US} / peer (median over runs, min-max):",
            "",
            "| peer | W1 1-by-1 | W1 bulk | W2 one process | W2 best | W4 |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for name, row in ratios.items():
            lines.append(
                f"| {name} | {cell(row['w1_one_by_one_jobs_s'])}"
                f" | {cell(row.get('w1_bulk_jobs_s'))}"
                f" | {cell(row['w2_defaults_jobs_s'])} | {cell(row['w2_best_jobs_s'])}"
                f" | {cell(row['w4_jobs_s'])} |"
            )
    lines += ["", "| target | measured (median, min-max) | met |", "| --- | ---: | --- |"]
    for target in summary["targets"]:
        met = {True: "yes", False: "**no**", None: "not measured"}[target["met"]]
        lines.append(f"| {target['target']} | {cell(target['measured'])} | {met} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Re-render the table from a sitting's raw ``runs.json``: ``python -m benchmarks.report F``."""
    import json
    import sys
    from pathlib import Path

    runs = json.loads(Path(sys.argv[1]).read_text())
    print(to_markdown(summarize(runs)))


if __name__ == "__main__":
    main()
