"""``jobs health`` and ``runworkers --health-port``, against real workers and a real outage.

Workers run with the ``watched`` backend of tests/ops_settings.py (heartbeat
0.5 s, stale after 2 s). An unreachable database is a ``DATABASE_URL`` whose
port nothing listens on; the real server is never stopped.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db.models import F
from django.utils import timezone

from django_jobs.backend import jobs_backend
from django_jobs.health import Status, _process_exists, check_health
from django_jobs.models import Worker
from tests.conftest import ROOT, WorkerProcess, subprocess_env, wait_until
from tests.testapp import tasks

pytestmark = pytest.mark.postgres

WATCHED = ("--settings", "tests.ops_settings", "--backend", "watched")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def health(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "django", "jobs", *WATCHED[:2], "health", *WATCHED[2:], *args],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())
    except urllib.error.URLError as down:  # not listening yet
        return 0, {"ok": False, "reason": str(down.reason)}


@pytest.fixture
def unreachable_database(monkeypatch: pytest.MonkeyPatch) -> None:
    """Subprocesses started after this connect to a port where nothing listens."""
    monkeypatch.setenv("DATABASE_URL", f"postgres://root@127.0.0.1:{free_port()}/jobs_ops")


def test_health__a_killed_worker_turns_ok_into_critical_once_its_heartbeat_is_stale(
    pg: None, start_workers: Callable[..., WorkerProcess]
) -> None:
    workers = start_workers(*WATCHED)
    ok = wait_until(lambda: (done := health()).returncode == 0 and done)
    assert ok.stdout.startswith(
        f"OK: database 'default' reachable; 1 worker(s) heartbeating on {socket.gethostname()}"
    )

    workers.kill_group()

    critical = wait_until(lambda: (done := health()).returncode == 2 and done)
    assert critical.stdout.strip() == (
        f"CRITICAL: no worker of backend 'watched' on host {socket.gethostname()} has "
        "heartbeated in the last 2s; 1 gone without stopping"
    )


def test_process_exists__a_zombie_counts_as_gone() -> None:
    # What a worker killed with its supervisor is until the host's init reaps it.
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        stat = Path(f"/proc/{pid}/stat")
        wait_until(lambda: stat.read_text().rsplit(")", 1)[-1].split()[0] == "Z")

        assert _process_exists(pid) is False
    finally:
        os.waitpid(pid, 0)


def test_health__another_hosts_silent_workers_are_counted_not_looked_up_here(pg: None) -> None:
    now = timezone.now()
    fields = {"backend": "default", "host": "other-host", "concurrency": 1, "started_at": now}
    Worker.objects.create(pid=4242, heartbeat_at=now, **fields)
    # Its pid is this test's own process: looked up here, it "still runs".
    Worker.objects.create(pid=os.getpid(), heartbeat_at=now - timedelta(hours=1), **fields)

    report = check_health(jobs_backend("default"), "other-host", None, None)

    workers = [(c.status, c.detail) for c in report.checks if c.name == "workers"]
    assert workers == [
        (
            Status.OK,
            "1 worker(s) heartbeating on other-host; 1 silent, their processes not checked "
            "from here",
        )
    ]


def test_health__an_unreachable_database_is_critical(pg: None, unreachable_database: None) -> None:
    done = health("--json")

    report = json.loads(done.stdout)
    assert (done.returncode, report["status"], report["code"]) == (2, "critical", 2)
    assert report["reason"].startswith("CRITICAL: database 'default' unreachable: ")
    assert [check["name"] for check in report["checks"]] == ["database"]


def test_sigterm__stops_at_once_a_worker_still_waiting_for_its_database(
    pg: None, unreachable_database: None, start_workers: Callable[..., WorkerProcess]
) -> None:
    workers = start_workers(*WATCHED)
    wait_until(lambda: "Database unavailable during start-up" in workers.output())

    workers.signal(signal.SIGTERM)

    assert workers.wait(5) == 0
    assert "stopped before it started" in workers.output()


def test_health__a_backlog_deeper_than_max_depth_is_a_warning(
    pg: None, start_workers: Callable[..., WorkerProcess]
) -> None:
    start_workers(*WATCHED, "--queues", "other")
    wait_until(lambda: health().returncode == 0)
    for number in range(3):
        tasks.add.enqueue(number, number)  # queue default: nobody serves it

    done = health("--max-depth", "2", "--json")

    report = json.loads(done.stdout)
    assert (done.returncode, report["reason"]) == (
        1,
        "WARNING: queue default: 3 ready jobs (max 2)",
    )
    assert {c["name"]: c["status"] for c in report["checks"]} == {
        "database": "ok",
        "workers": "ok",
        "listen": "ok",
        "backlog": "warning",
    }


def test_health_port__is_live_and_ready_until_a_worker_stops_turning(
    pg: None, start_workers: Callable[..., WorkerProcess]
) -> None:
    port = free_port()
    start_workers(*WATCHED, "--health-port", str(port))
    wait_until(lambda: get(port, "/readyz")[0] == 200)
    assert get(port, "/livez") == (200, {"ok": True, "reason": "ok"})
    assert get(port, "/metrics")[0] == 404
    # Both loops have turned once (a job claimed, a heartbeat written after the
    # registration): a worker stopped before that counts as still starting.
    job = tasks.noop.enqueue()
    wait_until(lambda: job.refresh() or job.status == "SUCCESSFUL")
    worker = wait_until(
        lambda: Worker.objects.filter(stopped_at=None, heartbeat_at__gt=F("started_at")).first()
    )
    pid = worker.pid

    os.kill(pid, signal.SIGSTOP)  # the process exists; its loops no longer turn
    try:
        _, body = wait_until(lambda: (got := get(port, "/livez"))[0] == 503 and got)
    finally:
        os.kill(pid, signal.SIGCONT)

    assert body["ok"] is False
    assert body["reason"].startswith(f"worker process {pid} (slot 0): its ")
    assert "has not turned for" in body["reason"] and body["reason"].endswith("(limit 2s)")


def test_health_port__is_not_ready_while_the_database_is_unreachable(
    pg: None, unreachable_database: None, start_workers: Callable[..., WorkerProcess]
) -> None:
    port = free_port()
    workers = start_workers(*WATCHED, "--health-port", str(port))
    wait_until(lambda: "Health probes on port" in workers.output())

    def past_the_first_fork() -> tuple[int, dict[str, Any]] | None:
        """The probes answer before the first worker process is forked; on a busy
        host the first answers may still say so."""
        answer = get(port, "/readyz")
        return None if answer[1]["reason"] == "no worker process is running" else answer

    status, body = wait_until(past_the_first_fork)

    assert status == 503
    assert body["reason"].startswith("database 'default' unreachable: ")
    assert get(port, "/livez")[0] == 200  # starting up, waiting for the database: not stuck
