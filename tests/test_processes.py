"""Real worker processes: many at once, killed, paused, stopped, and a database restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import psycopg
import pytest
from django.db import connections
from django.db.models import Count, Max
from django.utils import timezone

from django_jobs import AttemptOutcome, JobState
from django_jobs.models import Attempt, Job, Step, Worker
from tests.conftest import ROOT, WorkerProcess, subprocess_env, wait_until
from tests.testapp import tasks
from tests.testapp.models import Ledger

pytestmark = pytest.mark.postgres

Start = Callable[..., WorkerProcess]


def job_state(job_id: str) -> str:
    return Job.objects.get(id=job_id).state


def running_pid(job_id: str) -> int | None:
    """The pid of the worker process running the job, once it runs."""
    attempt = Attempt.objects.filter(job_id=job_id, outcome=AttemptOutcome.RUNNING).first()
    if attempt is None:
        return None
    return Worker.objects.get(id=attempt.worker_id).pid


@pytest.mark.scale
def test_four_workers_drain_2000_jobs_each_exactly_once(pg: None, start_workers: Start) -> None:
    for _ in range(2000):
        tasks.record.enqueue()
    workers = [start_workers("--burst", "--concurrency", "4") for _ in range(4)]
    codes = [w.wait(240) for w in workers]
    states = dict(Job.objects.values_list("state").annotate(n=Count("id")))
    assert codes == [0, 0, 0, 0]
    assert states == {JobState.SUCCEEDED: 2000}
    assert Ledger.objects.count() == 2000
    assert Job.objects.aggregate(most=Max("attempts"))["most"] == 1
    assert Attempt.objects.count() == 2000
    assert Worker.objects.filter(jobs_done__gt=0).count() == 4


@pytest.mark.scale
def test_sigkilled_worker_job_reruns_elsewhere_after_its_lease_expires(
    pg: None, start_workers: Start
) -> None:
    result = tasks.slow_record.enqueue(3.0)
    first = start_workers("--concurrency", "1")
    wait_until(lambda: running_pid(result.id), timeout=30)
    first.kill_group()  # supervisor too: nobody can release the lease early
    killed_at = timezone.now()
    start_workers("--concurrency", "1")
    wait_until(lambda: job_state(result.id) == JobState.SUCCEEDED, timeout=40)
    result.refresh()
    rerun_after = (result.attempt_log[1].started_at - killed_at).total_seconds()
    assert [a.outcome for a in result.attempt_log] == [
        AttemptOutcome.LOST,
        AttemptOutcome.SUCCEEDED,
    ]
    assert result.attempt_log[0].worker_id != result.attempt_log[1].worker_id
    assert "lease expired" in result.attempt_log[0].error_message
    print(f"re-run started {rerun_after:.1f}s after SIGKILL (default lease settings)")


def test_supervisor_releases_a_dead_workers_jobs_at_once(pg: None, start_workers: Start) -> None:
    result = tasks.kill_own_worker_once.enqueue()
    start_workers("--concurrency", "1")
    wait_until(lambda: job_state(result.id) == JobState.SUCCEEDED, timeout=8)
    result.refresh()
    assert [a.outcome for a in result.attempt_log] == [
        AttemptOutcome.LOST,
        AttemptOutcome.SUCCEEDED,
    ]
    assert "died (killed by signal 9)" in result.attempt_log[0].error_message


def test_supervisor_releases_at_once_a_worker_that_exited_zero_holding_a_job(
    pg: None, start_workers: Start
) -> None:
    result = tasks.exits.enqueue(0)  # os._exit(0) in a job thread: the worker ends "cleanly"
    burst = start_workers("--burst", "--concurrency", "1")

    burst.wait(30)

    result.refresh()
    assert (result.state, [a.outcome for a in result.attempt_log]) == (
        JobState.QUEUED,
        [AttemptOutcome.LOST],
    )
    assert "died (exit 0)" in result.attempt_log[0].error_message


def test_sigterm_ends_an_isolated_suspects_child_with_its_worker(
    pg: None, start_workers: Start
) -> None:
    result = tasks.slow_record.enqueue(4.0)
    Job.objects.filter(id=result.id).update(lost_streak=1)  # a suspect: it runs in a child
    workers = start_workers("--backend", "fast", "--concurrency", "1")
    running = Attempt.objects.filter(job_id=result.id, outcome=AttemptOutcome.RUNNING)
    wait_until(running.exists, timeout=30)
    time.sleep(1.0)  # the child is running the task

    workers.signal(signal.SIGTERM)  # the grace (1 s) ends before the task does
    workers.wait(20)
    time.sleep(4.5)  # past the moment the task would have written its row

    assert job_state(result.id) == JobState.QUEUED  # released: it may run elsewhere now
    assert not Ledger.objects.exists()  # and never ran on here


def test_a_stop_signal_relayed_while_a_worker_is_built_stops_it_once_it_can(pg: None) -> None:
    """The supervisor forks with SIGTERM blocked; the worker's handlers take what waited.

    In a fresh interpreter, as a worker process is: a fork of this test process
    carries whatever earlier tests left in it.
    """
    script = """
import os, signal, sys
import django
django.setup()
from django_jobs.worker.config import WorkerConfig
from django_jobs.worker.process import STOP_SIGNALS, Worker
signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # as forked by the supervisor
os.kill(os.getpid(), signal.SIGTERM)  # relayed before the worker's handlers exist
worker = Worker(WorkerConfig(backend="default"))
worker.install_signal_handlers(handle_sigint=False)
sys.exit(0 if worker.stopping.is_set() else 1)
"""

    done = subprocess.run(
        [sys.executable, "-c", script], env=subprocess_env(), cwd=ROOT, timeout=60
    )

    assert done.returncode == 0


def test_sigkill_between_steps__the_rerun_on_a_fresh_worker_runs_only_the_step_left(
    pg: None, start_workers: Start
) -> None:
    result = tasks.steps_until_killed.enqueue()
    start_workers("--concurrency", "1")
    wait_until(lambda: Step.objects.filter(job_id=result.id, name="two").exists(), timeout=30)
    os.kill(running_pid(result.id) or 0, signal.SIGKILL)  # the worker process, mid-task
    wait_until(lambda: job_state(result.id) == JobState.SUCCEEDED, timeout=30)
    result.refresh()
    ledger = Ledger.objects.filter(job_key__startswith=f"{result.id}:")
    assert sorted(ledger.values_list("job_key", "attempt")) == [
        (f"{result.id}:one", 1),
        (f"{result.id}:three", 2),
        (f"{result.id}:two", 1),
    ]
    assert [a.outcome for a in result.attempt_log] == [
        AttemptOutcome.LOST,
        AttemptOutcome.SUCCEEDED,
    ]
    assert result.attempt_log[0].worker_id != result.attempt_log[1].worker_id
    assert result.return_value == ["one", "two", "three"]


def test_paused_workers_late_completion_changes_nothing(pg: None, start_workers: Start) -> None:
    result = tasks.slow_record.enqueue(1.0)
    paused = start_workers("--backend", "fast", "--concurrency", "1")
    pid = wait_until(lambda: running_pid(result.id), timeout=30)
    subprocess.run(["kill", "-STOP", str(pid)], check=True)
    rescuer = start_workers("--backend", "fast", "--concurrency", "1")
    wait_until(lambda: job_state(result.id) == JobState.SUCCEEDED, timeout=30)
    rescuer.signal(signal.SIGTERM)
    subprocess.run(["kill", "-CONT", str(pid)], check=True)
    first = Attempt.objects.get(job_id=result.id, number=1)
    wait_until(lambda: Attempt.objects.get(pk=first.pk).late_report, timeout=30)
    first.refresh_from_db()
    job = Job.objects.get(id=result.id)
    assert (first.outcome, first.late_report["outcome"]) == ("lost", "succeeded")
    assert (job.state, job.attempts) == (JobState.SUCCEEDED, 2)
    assert paused.process.poll() is None  # the paused worker carried on, not crashed


def test_sigterm_lets_the_running_job_finish_and_exits_zero(pg: None, start_workers: Start) -> None:
    result = tasks.slow_record.enqueue(2.0)
    worker = start_workers("--concurrency", "1")
    wait_until(lambda: running_pid(result.id), timeout=30)
    worker.signal(signal.SIGTERM)
    code = worker.wait(30)
    result.refresh()
    assert (code, result.state, result.attempts) == (0, JobState.SUCCEEDED, 1)


def test_sigterm_releases_jobs_that_outlive_the_grace_period(
    pg: None, start_workers: Start
) -> None:
    result = tasks.slow_record.enqueue(30.0)
    worker = start_workers("--backend", "fast", "--concurrency", "1")
    wait_until(lambda: running_pid(result.id), timeout=30)
    worker.signal(signal.SIGTERM)
    code = worker.wait(20)
    result.refresh()
    assert (code, result.state) == (0, JobState.QUEUED)
    assert result.attempt_log[0].outcome == AttemptOutcome.LOST
    assert "shut down before the job finished" in result.attempt_log[0].error_message


def test_sigterm__a_job_released_at_each_of_three_shutdowns_is_not_taken_for_poison(
    pg: None, start_workers: Start
) -> None:
    result = tasks.slow_record.enqueue(30.0)
    for _ in range(3):  # three deploys in a row, each past the grace (1 s)
        worker = start_workers("--backend", "fast", "--concurrency", "1")
        wait_until(lambda: running_pid(result.id), timeout=30)
        worker.signal(signal.SIGTERM)
        worker.wait(20)

    job = Job.objects.get(id=result.id)
    assert (job.state, job.lost_streak, job.attempts) == (JobState.QUEUED, 0, 3)


def postgres_answers() -> bool:
    params = connections["default"].get_connection_params()
    try:
        psycopg.connect(**{**params, "connect_timeout": 1}).close()
    except psycopg.OperationalError:
        return False
    return True


def restart_postgres() -> None:
    """Restart the cluster the test database is on: the one listening on its port.

    CI gives these tests a cluster of their own (.ci/run), so that they run
    beside the suites on the main one without ending their sessions.
    """
    port = str(connections["default"].get_connection_params().get("port") or 5432)
    listed = subprocess.run(
        ["pg_lsclusters", "--no-header"], capture_output=True, text=True, check=True
    ).stdout
    # Each line: version, cluster, port, status, owner, data directory, log file.
    version, cluster = next(
        (version, cluster)
        for version, cluster, listening, *_ in map(str.split, listed.splitlines())
        if listening == port
    )
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, cluster, "restart"],
        check=True,
        capture_output=True,
        timeout=120,
    )


@pytest.mark.restarts_postgres
def test_postgres_restart_while_draining_loses_no_job(pg: None, start_workers: Start) -> None:
    # 400 jobs of 0.1 s on 2 x 2 threads: about 10 s of work, so the restart
    # lands mid-drain whatever the engine's speed.
    ids = [tasks.record_once.enqueue(0.1).id for _ in range(400)]
    for _ in range(2):
        start_workers("--concurrency", "2")
    wait_until(lambda: Job.objects.filter(state=JobState.SUCCEEDED).count() >= 40, timeout=60)
    connections.close_all()
    restart_postgres()
    wait_until(postgres_answers, timeout=60, interval=0.2)
    back_at = time.monotonic()
    connections.close_all()
    done_before = Job.objects.filter(state=JobState.SUCCEEDED).count()
    wait_until(
        lambda: Job.objects.filter(state=JobState.SUCCEEDED).count() > done_before, timeout=30
    )
    resumed_after = time.monotonic() - back_at
    wait_until(lambda: Job.objects.filter(state=JobState.SUCCEEDED).count() == 400, timeout=180)
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.SUCCEEDED}
    assert Ledger.objects.filter(job_key__in=ids).count() == 400
    print(f"work resumed {resumed_after:.1f}s after PostgreSQL answered again")
