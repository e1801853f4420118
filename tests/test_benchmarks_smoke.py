"""Smoke run of the benchmark harness: every workload, tiny sizes, django-jobs only.

Not a timed test: it only proves ``benchmarks/`` still runs against the engine
(no peers, no benchmark virtualenv), so the harness cannot rot. The driver
runs in a subprocess because it sets Django up on ``benchmarks.settings``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.db import connections

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.postgres


def _server() -> str:
    """The PostgreSQL server the suite uses, as ``postgres://user@host:port``."""
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        parts = urlsplit(url)
        return f"postgres://{parts.netloc}"
    params = connections["default"].settings_dict
    user = params.get("USER") or "root"
    return f"postgres://{user}@{params.get('HOST') or '127.0.0.1'}:{params.get('PORT') or 5432}"


@pytest.mark.scale
def test_every_workload_runs_at_tiny_size_for_django_jobs() -> None:
    db = f"bench_smoke_{os.getpid()}"
    env = {**os.environ, "BENCH_PG": _server(), "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    argv = ["--peer", "django-jobs", "--db", db, "--create-db", "--smoke"]
    argv += ["--only", "w1,w2,w3,w4,w6,w7"]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.driver", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["errors"] == {}, result["errors"]
    assert result["w1"]["one_by_one_jobs_s"] > 0
    assert result["w1"]["bulk_jobs_s"] > 0  # through enqueue_many
    for setting in ("defaults", "best"):
        assert result["w2"][setting]["jobs_s"] > 0
        assert result["w2"][setting]["peak_rss_mb"] > 0  # W5
    # The probe stamps its first line before the harness reads its clock after
    # the commit returns whenever the worker, woken by the commit's NOTIFY, is
    # scheduled first: below zero by as long as the harness waits for a core
    # (docs/benchmarks.md says the same of PgQueuer's p50), -6.9 ms seen in CI
    # with the suite's other processes beside it. A broken clock (another
    # clock, another time zone) is off by a second or more.
    assert -1000 < result["w3"]["p50_ms"] <= result["w3"]["p95_ms"] < 5000
    assert result["w4"]["jobs_s"] > 0
    assert result["w6"]["capacity_jobs_s"] > 0
    windows = result["w6"]["windows"]
    assert [w["warmup"] for w in windows][:2] == [True, False]
    # The warm-up window is reported, not judged.
    judged = [w["completed_s"] for w in windows if not w["warmup"]]
    assert result["w6"]["min_completed_s"] == min(judged)
    # The steady yardstick: a window's completions after the warm-up, nothing offered.
    steady = result["w6"]["steady_capacity_jobs_s"]
    assert steady > 0
    assert result["w6"]["steady_min_ratio"] == min(judged) / steady
    assert windows[0]["dead_tuples"]["django_jobs_job"] >= 0
    # The producer enqueues in every window, so it uses some CPU in some
    # window; the machine cannot be busier than all of it.
    assert max(w["producer_cores"] for w in windows) > 0
    assert all(0 < w["machine_busy"] <= 1 for w in windows)
    for phase in ("clean", "pinned", "recovering", "recovered"):
        assert result["w7"][phase]["completed_s"] > 0
        assert result["w7"][phase]["probes_not_started"] == 0


def test_overload_judges_only_the_windows_after_the_warm_up() -> None:
    from benchmarks.workloads import judge_windows

    windows = [
        {"warmup": True, "completed_s": 100.0},
        {"warmup": False, "completed_s": 900.0},
        {"warmup": False, "completed_s": 800.0},
        {"warmup": False, "completed_s": 1000.0},
    ]

    verdict = judge_windows(windows, capacity=1000.0)

    assert verdict == {"median_completed_s": 900.0, "min_completed_s": 800.0, "min_ratio": 0.8}


def test_report_renders_a_table_from_a_run() -> None:
    from benchmarks.report import summarize, to_markdown

    run = {
        "peer": "django-jobs",
        "versions": {"django-jobs": "0.1.0"},
        "settings": {"defaults": "d", "best": "b"},
        "errors": {},
        "w1": {"one_by_one_jobs_s": 100.0, "bulk_jobs_s": None},
        "w2": {
            "defaults": {"jobs_s": 10.0, "peak_rss_mb": 50.0},
            "best": {"jobs_s": 20.0, "peak_rss_mb": 60.0},
        },
        "w3": {"p50_ms": 2.0, "p95_ms": 3.0, "max_ms": 3.0},
        "w4": {"jobs_s": 19.0, "peak_rss_mb": 61.0},
    }
    summary = summarize([[run], [{**run, "w1": {"one_by_one_jobs_s": 200.0, "bulk_jobs_s": None}}]])
    peer = summary["peers"]["django-jobs"]
    assert peer["w1_one_by_one_jobs_s"]["median"] == 150.0
    assert peer["w1_bulk_jobs_s"] is None
    table = to_markdown(summary)
    assert "django-jobs" in table and "no bulk path" in table
