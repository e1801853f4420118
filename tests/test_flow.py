"""Flow control: pause, concurrency limits, tenant fairness, rate limits, polling."""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, connections, transaction
from django.db.models import F, Max
from django.test import override_settings

from django_jobs import EnqueueOutcome, JobState, control, enqueue_many, framework
from django_jobs.conf import JobsOptions
from django_jobs.engine import engine_for, flow
from django_jobs.exceptions import NotAJobsBackendError
from django_jobs.framework import task_backends
from django_jobs.models import Attempt, FairClock, Job, QueueEvent, RateWindow
from django_jobs.values import Claimed, WorkerIdentity
from django_jobs.worker.runner import given_back
from tests.conftest import (
    WorkerProcess,
    analyse_empty_tables,
    one_slot_fair_order,
    wait_until,
    waiting_for_a_lock,
)
from tests.testapp import tasks
from tests.testapp.models import Probe

pytestmark = pytest.mark.postgres

Start = Callable[..., WorkerProcess]
FLOW = ("--backend", "flow")


def rules() -> JobsOptions:
    return task_backends["flow"].settings  # type: ignore[attr-defined, no-any-return]


def claim(queues: Sequence[str], limit: int = 10) -> list[Claimed]:
    me = WorkerIdentity(uuid.uuid4(), "test")
    return engine_for("default", rules()).claim(me, queues, limit)


def most_at_once(probes: Sequence[Probe]) -> int:
    """The largest number of probe intervals that overlap at one moment."""
    edges = sorted([(p.started, 1) for p in probes] + [(p.ended, -1) for p in probes])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


# -- pause ------------------------------------------------------------------------


def test_pause__stops_every_claim_until_resumed(pg: None) -> None:
    tasks.add.enqueue(1, 2)
    control.pause_queue("default", actor="ops", note="db maintenance")
    while_paused = claim(["default"])
    control.resume_queue("default", actor="ops")
    after = claim(["default"])
    events = list(QueueEvent.objects.order_by("at").values_list("action", "actor", "note"))
    assert (len(while_paused), len(after)) == (0, 1)
    assert events == [("pause", "ops", "db maintenance"), ("resume", "ops", "")]


def test_pause__a_second_pause_changes_nothing(pg: None) -> None:
    first = control.pause_queue("default", actor="ops")
    second = control.pause_queue("default", actor="ops")
    assert (first, second, QueueEvent.objects.count()) == (True, False, 1)


def test_pause__an_unknown_queue_is_refused(pg: None) -> None:
    with pytest.raises(ValueError, match="Unknown queue 'nope'"):
        control.pause_queue("nope", actor="ops")


def test_pause__a_backend_that_is_not_a_jobs_backend_is_refused_and_nothing_recorded(
    pg: None,
) -> None:
    immediate = {"BACKEND": f"{framework.MODULE}.backends.immediate.ImmediateBackend"}
    with (
        override_settings(TASKS={**settings.TASKS, "immediate": immediate}),
        pytest.raises(NotAJobsBackendError) as refused,
    ):
        control.pause_queue("default", actor="ops", backend="immediate")

    assert str(refused.value) == (
        f"TASKS['immediate'] uses {framework.MODULE}.backends.immediate.ImmediateBackend, "
        "not django_jobs.backend.JobsBackend or a subclass of it."
    )
    assert QueueEvent.objects.count() == 0


def test_pause__a_paused_flow_controlled_queue_is_not_claimed(pg: None) -> None:
    tasks.add.using(backend="flow", queue_name="limited").enqueue(1, 2)
    control.pause_queue("limited", actor="ops", backend="flow")
    assert claim(["limited"]) == []


# -- concurrency limits, with real worker processes ------------------------------------


@pytest.mark.scale
def test_queue_concurrency__never_exceeded_by_four_worker_processes(
    pg: None, start_workers: Start
) -> None:
    for _ in range(16):
        tasks.probe.using(backend="flow", queue_name="limited").enqueue(0.3)
    workers = [start_workers(*FLOW, "--burst", "--queues", "limited") for _ in range(4)]
    assert [w.wait(90) for w in workers] == [0, 0, 0, 0]
    probes = list(Probe.objects.all())
    assert (len(probes), most_at_once(probes)) == (16, 2)


def test_key_concurrency__one_running_per_key_across_worker_processes(
    pg: None, start_workers: Start
) -> None:
    for n in range(12):
        key = f"account-{n % 3}"
        tasks.probe.using(backend="flow", queue_name="keyed", concurrency_key=key).enqueue(0.2, key)
    workers = [start_workers(*FLOW, "--burst", "--queues", "keyed") for _ in range(4)]
    assert [w.wait(90) for w in workers] == [0, 0, 0, 0]
    by_key = {
        key: most_at_once(list(Probe.objects.filter(key=key)))
        for key in ("account-0", "account-1", "account-2")
    }
    assert by_key == {"account-0": 1, "account-1": 1, "account-2": 1}
    assert most_at_once(list(Probe.objects.all())) > 1  # keys did run side by side


@pytest.mark.parametrize(
    "options",
    [
        {"KEY_CONCURRENCY": {"keyed": 1}},
        {"KEY_RATE_LIMITS": {"keyed": (1, 60.0)}},
        {"KEY_CONCURRENCY": {"keyed": 1}, "FAIR_QUEUES": {"keyed": {}}},
    ],
    ids=["concurrency", "rate", "concurrency-and-fair"],
)
def test_key_limits__a_long_run_of_one_key_does_not_hold_back_the_other_keys(
    pg: None, options: dict[str, Any]
) -> None:
    keyed = tasks.noop.using(backend="flow", queue_name="keyed")
    enqueue_many(keyed.using(concurrency_key="big"), [((), {})] * 50)
    for n in range(5):
        keyed.using(concurrency_key=f"k{n}").enqueue()
    limits = JobsOptions.from_mapping("flow", options)
    me = WorkerIdentity(uuid.uuid4(), "keys")
    claimed = [c for _ in range(2) for c in engine_for("default", limits).claim(me, ["keyed"], 10)]
    keys = Counter(
        Job.objects.filter(id__in=[c.job_id for c in claimed]).values_list(
            "concurrency_key", flat=True
        )
    )
    assert keys == {"big": 1, "k0": 1, "k1": 1, "k2": 1, "k3": 1, "k4": 1}


def test_limited_claim__skips_a_job_a_debounce_put_off_between_its_read_and_its_lock(
    pg: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = {"backend": "flow", "queue_name": "limited", "unique_key": "k"}
    first = tasks.add.using(**key, debounce=timedelta(milliseconds=50)).enqueue(1, 2)
    time.sleep(0.1)  # due
    later: list[Any] = []
    choose = flow.within_key_limits

    def choose_then_debounce(*args: Any, **kwargs: Any) -> Any:
        chosen = choose(*args, **kwargs)

        # Another process's call of the key commits between the read and the lock.
        def call() -> None:
            later.append(tasks.add.using(**key, debounce=timedelta(hours=1)).enqueue(5, 6))
            connections.close_all()

        other = threading.Thread(target=call)
        other.start()
        other.join(10)
        return chosen

    monkeypatch.setattr(flow, "within_key_limits", choose_then_debounce)

    got = claim(["limited"], 1)

    job = Job.objects.get(id=first.id)
    assert (got, later[0].enqueue_outcome, job.state, job.args) == (
        [],
        EnqueueOutcome.DEBOUNCED,
        JobState.QUEUED,
        [5, 6],
    )


# -- fairness ----------------------------------------------------------------------------


def test_claim__takes_flow_controlled_queues_in_the_order_of_their_names(pg: None) -> None:
    """One lock order for every worker, whatever order each lists its queues in."""
    for queue in ("limited", "fair"):
        enqueue_many(tasks.noop.using(backend="flow", queue_name=queue), [((), {})] * 2)

    got = claim(["limited", "fair"], limit=4)

    assert [c.queue for c in got] == ["fair", "fair", "limited", "limited"]


@pytest.mark.parametrize(
    ("queue", "taken"),
    [("limited", 1), ("keyed", 1), ("rated", 3), ("keyrated", 3), ("fair", 3)],
)
def test_claim__a_queue_with_a_concurrency_limit_gives_no_attempt_to_wait_for_a_thread(
    pg: None, queue: str, taken: int
) -> None:
    """One waiting would hold a slot of the limit that a worker with a free thread could run."""
    enqueue_many(tasks.noop.using(backend="flow", queue_name=queue), [((), {})] * 3)
    me = WorkerIdentity(uuid.uuid4(), "test")

    got = engine_for("default", rules()).claim(me, [queue], 1, ahead=2)

    assert len(got) == taken


def test_claim__a_limited_queues_job_is_not_claimed_behind_one_that_takes_the_free_thread(
    pg: None,
) -> None:
    tasks.noop.enqueue()
    enqueue_many(tasks.noop.using(backend="flow", queue_name="limited"), [((), {})] * 2)
    me = WorkerIdentity(uuid.uuid4(), "test")

    got = engine_for("default", rules()).claim(me, ["default", "limited"], 1, ahead=2)

    assert [c.queue for c in got] == ["default"]


def bulk_queue(tenant: str, count: int) -> None:
    fair = tasks.noop.using(backend="flow", queue_name="fair", tenant=tenant)
    enqueue_many(fair, [((), {})] * count)


def test_fairness__a_small_tenant_is_not_starved_by_a_huge_backlog(pg: None) -> None:
    analyse_empty_tables()
    bulk_queue("tenant-a", 100_000)
    bulk_queue("tenant-b", 100)
    order: list[str] = []
    while len(order) < 400:
        order += [c.tenant for c in claim(["fair"], limit=10)]
    last_b = max(i for i, tenant in enumerate(order) if tenant == "tenant-b")
    assert Counter(order[:200]) == {"tenant-a": 100, "tenant-b": 100}
    assert last_b < 200


@pytest.mark.parametrize(
    "options",
    [
        {"FAIR_QUEUES": {"fair": {}}},  # the one-statement claim
        {"FAIR_QUEUES": {"fair": {}}, "QUEUE_CONCURRENCY": {"fair": 10_000}},  # counted, locked
    ],
    ids=["fair", "fair-and-limited"],
)
def test_fairness__with_one_free_slot_a_late_tenant_takes_every_other_claim(
    pg: None, options: dict[str, Any]
) -> None:
    order = one_slot_fair_order("default", "flow", "fair", options)
    assert (order[:3], Counter(order[3:])) == (["a"] * 3, {"a": 100, "c": 100})


def test_fairness__a_job_given_back_unstarted_gives_its_tenant_the_turn_back(pg: None) -> None:
    bulk_queue("a", 2)
    bulk_queue("b", 2)
    me = WorkerIdentity(uuid.uuid4(), "test")
    engine = engine_for("default", rules())
    (first,) = engine.claim(me, ["fair"], 1)
    engine.finish(me.id, [given_back((first.job_id, first.token), first.attempt_id, "waited")])

    (again,) = engine.claim(me, ["fair"], 1)

    assert (first.tenant, again.tenant) == ("a", "a")


def test_fairness__weights_share_claims_in_proportion(pg: None) -> None:
    bulk_queue("gold", 300)
    bulk_queue("basic", 300)
    weighted = JobsOptions.from_mapping("flow", {"FAIR_QUEUES": {"fair": {"gold": 3, "basic": 1}}})
    me = WorkerIdentity(uuid.uuid4(), "test")
    order: list[str] = []
    while len(order) < 200:
        order += [c.tenant for c in engine_for("default", weighted).claim(me, ["fair"], 10)]
    assert Counter(order[:200]) == {"gold": 150, "basic": 50}


def test_fairness__a_concurrent_claimer_takes_the_next_fair_batch_and_counts_it_after_ours(
    pg: None,
) -> None:
    bulk_queue("tenant-a", 20)
    bulk_queue("tenant-b", 20)
    others: list[Claimed] = []

    def claim_elsewhere() -> None:
        others.extend(claim(["fair"], limit=4))
        connections.close_all()

    with transaction.atomic():
        first = claim(["fair"], limit=4)  # its rows and clocks stay locked until this commits
        elsewhere = threading.Thread(target=claim_elsewhere)
        elsewhere.start()
        wait_until(lambda: waiting_for_a_lock() == 1)  # on our clocks, past our rows
    elsewhere.join(10)
    assert {c.job_id for c in first}.isdisjoint(c.job_id for c in others)
    assert Counter(c.tenant for c in first) == {"tenant-a": 2, "tenant-b": 2}
    assert Counter(c.tenant for c in others) == {"tenant-a": 2, "tenant-b": 2}
    clocks = FairClock.objects.filter(queue="fair").values_list("tenant", "claims", "finish")
    assert sorted(clocks) == [("tenant-a", 4, 4.0), ("tenant-b", 4, 4.0)]


@pytest.mark.scale
@pytest.mark.parametrize(("processes", "threads"), [(1, 1), (2, 1), (2, 16)])
def test_workers__a_late_tenant_gets_its_100_jobs_within_250_claims_of_a_20000_job_backlog(
    pg: None, start_workers: Start, processes: int, threads: int
) -> None:
    """Real workers, the documented settings, statistics taken on the empty table."""
    analyse_empty_tables()
    start_workers("--backend", "fair", "--processes", str(processes), "--concurrency", str(threads))
    noop = tasks.noop.using(backend="fair")
    enqueue_many(noop.using(tenant="a"), [((), {})] * 20_000)
    wait_until(lambda: Attempt.objects.count() >= 50)  # the backlog is being worked on
    with transaction.atomic():
        enqueue_many(noop.using(tenant="b"), [((), {})] * 100)
    # A claim sees b's jobs only if it starts after that commit; one that
    # started before it (a batch still running, or waiting for a core)
    # cannot, and is not counted: claims are timed by their start, from when
    # the commit has returned (a loaded machine can hold this process between
    # a timestamp taken before the COMMIT and the COMMIT for dozens of claims).
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        (committed,) = cursor.fetchone()
    b = Attempt.objects.filter(job__tenant="b")
    wait_until(
        lambda: (
            b.count() == 100 or Attempt.objects.filter(started_at__gte=committed).count() > 2_000
        ),
        timeout=120,
    )
    last_b = b.aggregate(last=Max("id"))["last"]
    claims_until_b_done = Attempt.objects.filter(started_at__gte=committed, id__lte=last_b).count()
    assert b.count() == 100
    assert claims_until_b_done <= 250, f"{claims_until_b_done} claims until b's last"


# -- rate limits and polling -----------------------------------------------------------------


def test_rate_limit__claims_per_window_stay_within_the_limit(pg: None) -> None:
    for n in range(40):
        tasks.add.using(backend="flow", queue_name="rated").enqueue(n, n)
    windows: Counter[int] = Counter()
    # Until two full windows were counted: a slow host drops more claims that
    # straddle a window's end. The bound only guards against a hang.
    deadline = time.monotonic() + 30
    while sum(windows.values()) < 10 and time.monotonic() < deadline:
        before = math.floor(time.time())
        got = claim(["rated"], limit=10)
        # A claim that straddled a window's end counted in one of the two.
        if math.floor(time.time()) == before:
            windows[before] += len(got)
        time.sleep(0.02)
    assert max(windows.values()) <= 5
    assert sum(windows.values()) >= 10  # two full windows at least


def test_key_rate_limit__claims_per_key_and_window_stay_within_the_limit(pg: None) -> None:
    for key in ("x", "y"):
        keyed = tasks.add.using(backend="flow", queue_name="keyrated", concurrency_key=key)
        enqueue_many(keyed, [((n, n), {}) for n in range(10)])
    windows: Counter[tuple[str, int]] = Counter()
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        before = math.floor(time.time())
        got = claim(["keyrated"], limit=10)
        # A claim that straddled a window's end counted in one of the two.
        second = before if math.floor(time.time()) == before else None
        for claimed in got:
            key = Job.objects.get(id=claimed.job_id).concurrency_key or ""
            if second is not None:
                windows[(key, second)] += 1
        time.sleep(0.02)
    assert max(windows.values()) <= 2
    assert {key for key, _ in windows} == {"x", "y"}


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"RATE_LIMITS": {"rated": (2, 3600.0)}}, None),
        ({"KEY_RATE_LIMITS": {"rated": (2, 3600.0)}}, "k"),
    ],
    ids=["queue", "key"],
)
def test_rate_limit__an_attempt_given_back_unstarted_gives_its_start_back(
    pg: None, options: dict[str, Any], key: str | None
) -> None:
    """Claimed ahead and never run, it must not cost the window one of its two starts."""
    rated = tasks.noop.using(backend="flow", queue_name="rated", concurrency_key=key)
    enqueue_many(rated, [((), {})] * 3)
    engine = engine_for("default", JobsOptions.from_mapping("flow", options))
    me = WorkerIdentity(uuid.uuid4(), "test")
    first, _ = engine.claim(me, ["rated"], 2)
    engine.finish(me.id, [given_back((first.job_id, first.token), first.attempt_id, "waited")])

    again = engine.claim(me, ["rated"], 2)

    assert len(again) == 1


def test_rate_limit__a_give_back_refunds_the_window_its_claim_counted_in_not_leased_ats(
    pg: None,
) -> None:
    """The database's clock (leased_at) an hour ahead of the claim's: the same window refunded."""
    rated = tasks.noop.using(backend="flow", queue_name="rated")
    enqueue_many(rated, [((), {})] * 2)
    hourly = JobsOptions.from_mapping("flow", {"RATE_LIMITS": {"rated": (2, 3600.0)}})
    engine = engine_for("default", hourly)
    me = WorkerIdentity(uuid.uuid4(), "test")
    (first,) = engine.claim(me, ["rated"], 1)
    Job.objects.filter(id=first.job_id).update(leased_at=F("leased_at") + timedelta(hours=1))

    engine.finish(me.id, [given_back((first.job_id, first.token), first.attempt_id, "waited")])

    assert list(RateWindow.objects.values_list("claims", flat=True)) == [0]


def test_polling__a_worker_without_listen_still_picks_jobs_up(
    pg: None, start_workers: Start
) -> None:
    start_workers(*FLOW, "--queues", "default")
    wait_until(lambda: Job.objects.filter(state=JobState.QUEUED).count() == 0)
    result = tasks.add.using(backend="flow").enqueue(20, 22)
    wait_until(lambda: Job.objects.get(id=result.id).state == JobState.SUCCEEDED, timeout=10)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query ILIKE 'LISTEN%%'"
        )
        (listening,) = cursor.fetchone()
    assert listening == 0
