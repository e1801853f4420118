"""Periodic schedules: one job per tick however many workers run, and the missed-tick rule."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin.sites import site
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.test import Client
from django.utils import timezone

from django_jobs import schedules
from django_jobs.admin.schedules import ScheduleForm
from django_jobs.backend import JobsBackend
from django_jobs.conf import JobsOptions
from django_jobs.models import Job, Schedule
from django_jobs.schedules import CATCH_UP, SKIP, fire_due, plan, sync, tick_key
from tests.conftest import WorkerProcess, run_in_processes, wait_until

GRACE = timedelta(seconds=60)
NOON = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
TASK = "tests.testapp.tasks.add"


def backend(schedules_option: dict[str, Any] | None = None, **options: Any) -> JobsBackend:
    """A backend like tests.settings' "default", with these SCHEDULES."""
    return JobsBackend(
        "default",
        {
            "BACKEND": "django_jobs.backend.JobsBackend",
            "QUEUES": ["default", "other"],
            "OPTIONS": {"SCHEDULES": schedules_option or {}, **options},
        },
    )


def this_minute() -> datetime:
    return timezone.now().replace(second=0, microsecond=0)


def make_schedule(name: str = "minutely", **fields: Any) -> Schedule:
    """An enabled schedule whose current tick (this minute's) is due."""
    values: dict[str, Any] = {
        "task_name": TASK,
        "args": [1, 2],
        "cron": "* * * * *",
        "next_fire_at": this_minute(),
        **fields,
    }
    return Schedule.objects.create(name=name, **values)


def minutes(*values: int) -> tuple[datetime, ...]:
    return tuple(NOON.replace(minute=m) for m in values)


# -- the rule, as a pure function ------------------------------------------------


def test_plan__a_tick_found_on_time_fires_under_both_policies() -> None:
    now = NOON + timedelta(seconds=3)
    for missed in (SKIP, CATCH_UP):
        decided = plan("*/5 * * * *", "UTC", NOON, now, missed, 10, GRACE)
        assert decided.fire == (NOON,)
        assert decided.next_fire_at == NOON.replace(minute=5)
        assert not decided.dropped


def test_plan__nothing_fires_before_the_tick() -> None:
    decided = plan("*/5 * * * *", "UTC", NOON, NOON - timedelta(seconds=1), SKIP, 10, GRACE)
    assert (decided.fire, decided.next_fire_at) == ((), NOON)


def test_plan__skip_drops_ticks_found_later_than_the_grace() -> None:
    # Down from 11:58 to 12:31: 12:00 ... 12:30 are missed; 12:30 is 60 s + 1 s old.
    now = NOON.replace(minute=31, second=1)
    decided = plan("*/5 * * * *", "UTC", NOON, now, SKIP, 10, GRACE)
    assert decided.fire == ()
    assert decided.dropped
    assert decided.next_fire_at == NOON.replace(minute=35)


def test_plan__skip_fires_only_the_latest_tick_when_it_is_within_the_grace() -> None:
    now = NOON.replace(minute=30, second=59)
    decided = plan("*/5 * * * *", "UTC", NOON, now, SKIP, 10, GRACE)
    assert decided.fire == minutes(30)
    assert decided.dropped


def test_plan__skip_fires_every_tick_within_the_grace_oldest_first() -> None:
    # A pass that ran a little late finds two per-second ticks due: both are on time.
    now = NOON + timedelta(seconds=1, milliseconds=50)
    decided = plan("* * * * * *", "UTC", NOON, now, SKIP, 10, GRACE)
    assert decided.fire == (NOON, NOON + timedelta(seconds=1))
    assert not decided.dropped
    assert decided.next_fire_at == NOON + timedelta(seconds=2)


def test_plan__skip_drops_only_the_ticks_older_than_the_grace() -> None:
    now = NOON + timedelta(seconds=90)
    decided = plan("* * * * * */10", "UTC", NOON, now, SKIP, 1, GRACE)
    assert decided.fire == tuple(NOON + timedelta(seconds=s) for s in (30, 40, 50, 60, 70, 80, 90))
    assert decided.dropped  # 12:00:00, :10 and :20


def test_plan__catch_up_fires_the_latest_max_catch_up_ticks_oldest_first() -> None:
    now = NOON.replace(minute=31)
    decided = plan("*/5 * * * *", "UTC", NOON, now, CATCH_UP, 3, GRACE)
    assert decided.fire == minutes(20, 25, 30)
    assert decided.dropped  # 12:00 ... 12:15
    everything = plan("*/5 * * * *", "UTC", NOON, now, CATCH_UP, 10, GRACE)
    assert everything.fire == minutes(0, 5, 10, 15, 20, 25, 30)
    assert not everything.dropped


def test_plan__catch_up_work_is_bounded_by_max_catch_up_not_by_the_outage() -> None:
    a_year_later = NOON + timedelta(days=365)
    decided = plan("* * * * * *", "UTC", NOON, a_year_later, CATCH_UP, 2, GRACE)
    assert decided.fire == (a_year_later - timedelta(seconds=1), a_year_later)


def test_plan__ticks_are_read_in_the_schedules_timezone() -> None:
    # 09:00 in Paris is 08:00 UTC in winter.
    decided = plan(
        "0 9 * * *", "Europe/Paris", NOON.replace(hour=8), NOON.replace(hour=8), SKIP, 1, GRACE
    )
    assert decided.fire == (NOON.replace(hour=8),)
    assert decided.next_fire_at == datetime(2024, 1, 2, 8, 0, tzinfo=UTC)


def test_plan__dst__a_skipped_wall_time_fires_at_the_end_of_the_gap() -> None:
    # 2024-03-31 Paris: 02:00 -> 03:00. "02:30" does not exist that day.
    before = datetime(2024, 3, 31, 0, 0, tzinfo=UTC)
    tick = schedules.next_tick("30 2 * * *", "Europe/Paris", before)
    assert tick == datetime(2024, 3, 31, 1, 0, tzinfo=UTC)  # 03:00 CEST


def test_plan__dst__a_repeated_wall_time_fires_once_per_real_instant() -> None:
    # 2024-10-27 Paris: 03:00 CEST -> 02:00 CET. "02:30" happens twice.
    first = schedules.next_tick(
        "30 2 * * *", "Europe/Paris", datetime(2024, 10, 26, 22, 0, tzinfo=UTC)
    )
    second = schedules.next_tick("30 2 * * *", "Europe/Paris", first)
    assert (first, second) == (
        datetime(2024, 10, 27, 0, 30, tzinfo=UTC),
        datetime(2024, 10, 27, 1, 30, tzinfo=UTC),
    )
    assert tick_key("nightly", first) != tick_key("nightly", second)


# -- validation of OPTIONS["SCHEDULES"] ---------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"task": TASK}, r"\['nightly'\]: missing cron"),
        ({"task": TASK, "cron": "0 3 * * *", "when": 1}, r"\['nightly'\]: unknown key\(s\) when"),
        (
            {"task": TASK, "cron": "61 * * * *"},
            r"\['nightly'\]: cron '61 \* \* \* \*' is not valid",
        ),
        ({"task": TASK, "cron": "0 0 31 2 *"}, r"\['nightly'\]: cron '0 0 31 2 \*' is not valid"),
        (
            {"task": TASK, "cron": "0 3 * * *", "timezone": "Mars/Olympus"},
            r"\['nightly'\]: timezone 'Mars/Olympus' is not a known IANA timezone",
        ),
        (
            {"task": TASK, "cron": "0 3 * * *", "missed": "all"},
            r"missed must be one of skip, catch_up",
        ),
        ({"task": TASK, "cron": "0 3 * * *", "max_catch_up": 0}, r"max_catch_up must be"),
        ({"task": TASK, "cron": "0 3 * * *", "max_catch_up": 10**6}, r"max_catch_up must be"),
        ({"task": TASK, "cron": "0 3 * * *", "args": {1, 2}}, r"args must be a list"),
        ({"task": TASK, "cron": "0 3 * * *", "kwargs": {"at": datetime.now()}}, r"must be JSON"),
        ({"task": "add", "cron": "0 3 * * *"}, r"task must be a registered task's module path"),
    ],
)
def test_options__a_bad_schedule_is_refused_naming_it(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        JobsOptions.from_mapping("default", {"SCHEDULES": {"nightly": spec}})


def test_options__a_good_schedule_is_parsed_with_defaults() -> None:
    options = JobsOptions.from_mapping(
        "default", {"SCHEDULES": {"nightly": {"task": TASK, "cron": "0 3 * * *"}}}
    )
    spec = options.SCHEDULES["nightly"]
    assert (spec.timezone, spec.missed, spec.max_catch_up, spec.queue) == (
        "UTC",
        "skip",
        10,
        "default",
    )


# -- sync from settings -----------------------------------------------------------


@pytest.mark.postgres
def test_sync__inserts_updates_and_deletes_declared_rows_but_keeps_operator_rows(pg: None) -> None:
    make_schedule("added-in-admin", source=Schedule.Source.ADMIN)
    declared = {
        "nightly": {"task": TASK, "cron": "0 3 * * *", "args": [1, 2]},
        "gone-soon": {"task": TASK, "cron": "0 4 * * *", "args": [1, 2]},
    }
    first = sync(backend(declared))
    assert sorted(first.created) == ["gone-soon", "nightly"]
    nightly = Schedule.objects.get(name="nightly")
    assert (nightly.source, nightly.enabled) == (Schedule.Source.SETTINGS, True)
    assert nightly.next_fire_at is not None and nightly.next_fire_at.hour == 3

    Schedule.objects.filter(name="nightly").update(enabled=False)  # an operator's switch
    changed = {"nightly": {"task": TASK, "cron": "0 5 * * *", "args": [3, 4], "queue": "other"}}
    second = sync(backend(changed))
    assert (second.created, second.updated, second.deleted) == ((), ("nightly",), ("gone-soon",))
    nightly.refresh_from_db()
    assert (nightly.cron, nightly.args, nightly.queue, nightly.enabled) == (
        "0 5 * * *",
        [3, 4],
        "other",
        False,  # the sync never re-enables what an operator disabled
    )
    assert nightly.next_fire_at is not None and nightly.next_fire_at.hour == 5
    assert Schedule.objects.filter(name="added-in-admin").exists()
    assert sync(backend(changed)) == schedules.SyncResult((), (), ())


# -- firing ------------------------------------------------------------------------


@pytest.mark.postgres
def test_fire__enqueues_the_tick_with_its_key_and_advances_next_fire_at(pg: None) -> None:
    tick = this_minute()
    make_schedule("minutely", next_fire_at=tick, tenant="acme")
    assert fire_due(backend()) == 1
    job = Job.objects.get()
    assert (job.task_name, job.args, job.tenant, job.idempotency_key, job.initiator) == (
        TASK,
        [1, 2],
        "acme",
        tick_key("minutely", tick),
        "schedule:minutely",
    )
    row = Schedule.objects.get()
    assert row.last_fired_at == tick
    assert row.next_fire_at is not None and row.next_fire_at > timezone.now()
    assert fire_due(backend()) == 0


@pytest.mark.postgres
def test_fire__disabled_schedules_do_not_fire(pg: None) -> None:
    make_schedule(enabled=False)
    assert fire_due(backend()) == 0
    assert not Job.objects.exists()


@pytest.mark.postgres
def test_fire__skip_after_an_outage_fires_the_latest_tick_only_within_the_grace(pg: None) -> None:
    make_schedule("on-time", next_fire_at=this_minute() - timedelta(hours=3))
    assert fire_due(backend()) == 1  # this minute's tick, under 60 s old
    assert Job.objects.get().idempotency_key == tick_key("on-time", this_minute())

    Job.objects.all().delete()
    Schedule.objects.update(next_fire_at=this_minute() - timedelta(hours=3))
    assert fire_due(backend(SCHEDULE_GRACE_SECONDS=0.001)) == 0  # every due tick is late
    assert not Job.objects.exists()
    assert Schedule.objects.get().next_fire_at > timezone.now()  # type: ignore[operator]


@pytest.mark.postgres
def test_fire__catch_up_after_an_outage_fires_a_bounded_number_oldest_first(pg: None) -> None:
    make_schedule(next_fire_at=this_minute() - timedelta(hours=3), missed=CATCH_UP, max_catch_up=4)
    assert fire_due(backend()) == 4
    keys = list(Job.objects.order_by("enqueued_at").values_list("idempotency_key", flat=True))
    assert keys == [
        tick_key("minutely", this_minute() - timedelta(minutes=m)) for m in (3, 2, 1, 0)
    ]


@pytest.mark.postgres
def test_fire__an_enqueue_error_is_kept_on_the_schedule_and_the_tick_retried(pg: None) -> None:
    make_schedule(task_name="tests.testapp.tasks.no_such_task")
    assert fire_due(backend()) == 0
    row = Schedule.objects.get()
    assert "UnknownTaskError" in row.last_error
    assert row.next_fire_at is not None and row.next_fire_at <= timezone.now()
    Schedule.objects.update(task_name=TASK)
    assert fire_due(backend()) == 1
    assert Schedule.objects.get().last_error == ""


def test_fire__a_tick_dropped_past_its_grace_keeps_the_error_of_the_failed_fire(pg: None) -> None:
    tick = NOON.replace(hour=3)
    make_schedule(task_name="tests.testapp.tasks.no_such_task", cron="0 3 * * *", next_fire_at=tick)
    fire_due(backend(), now=tick + timedelta(seconds=1))  # fails: the task is unknown

    fired = fire_due(backend(), now=tick + timedelta(seconds=61))  # past the 60 s grace: dropped

    row = Schedule.objects.get()
    assert (fired, Job.objects.count()) == (0, 0)
    assert row.last_error.startswith("UnknownTaskError: ")
    assert row.next_fire_at == tick + timedelta(days=1)


@pytest.mark.postgres
def test_run_now__enqueues_an_extra_job_without_touching_the_ticks(pg: None) -> None:
    row = make_schedule(next_fire_at=timezone.now() + timedelta(hours=1))
    result = schedules.run_now(backend(), row, "alice")
    job = Job.objects.get(id=result.id)
    assert job.idempotency_key is not None
    assert job.idempotency_key.startswith("schedule:minutely:manual:")
    assert job.initiator == "schedule:minutely run now by alice"
    assert Schedule.objects.get().next_fire_at == row.next_fire_at


def _fire_in_child(results: Any) -> None:
    connections.close_all()
    results.put(fire_due(backend()))
    connections.close_all()


@pytest.mark.postgres
def test_fire__racing_schedulers_in_six_processes_enqueue_each_tick_once(pg: None) -> None:
    minute = this_minute()
    for n in range(20):
        # Due: minute - 3, - 2, - 1 and minute itself.
        make_schedule(
            f"s{n}", cron="* * * * *", next_fire_at=minute - timedelta(minutes=3), missed=CATCH_UP
        )
    fired = run_in_processes(_fire_in_child, 6)
    assert sum(fired) == Job.objects.count() == 20 * 4
    for row in Schedule.objects.all():
        assert Job.objects.filter(initiator=f"schedule:{row.name}").count() == 4


# -- the real thing: worker processes ---------------------------------------------------


def _seconds_between(ticks: list[datetime]) -> list[float]:
    return [(b - a).total_seconds() for a, b in itertools.pairwise(ticks)]


@pytest.mark.postgres
@pytest.mark.scale
def test_workers__a_per_second_schedule_fires_every_tick_once_with_one_and_three_workers(
    pg: None, start_workers: Callable[..., WorkerProcess]
) -> None:
    """90 s of a per-second cron under the default settings and missed policy (skip).

    Both cases run at once: schedule "alone" is fired by the one worker of the
    "default" backend, "crowded" by the three workers of the "fast" backend
    (a schedule belongs to one backend alias, and only its workers fire it).
    """
    for name, alias in (("alone", "default"), ("crowded", "fast")):
        make_schedule(
            name,
            backend=alias,
            task_name="tests.testapp.tasks.noop",
            args=[],
            cron="* * * * * *",
            next_fire_at=None,
        )
    start_workers("--backend", "default", "-p", "1", "-c", "1")
    for _ in range(3):
        start_workers("--backend", "fast", "-p", "1", "-c", "1")
    # Watched for 91 s from both schedules' first tick: a worker that starts
    # slowly on a busy host shortens nothing.
    names = ("alone", "crowded")
    wait_until(
        lambda: all(Job.objects.filter(initiator=f"schedule:{n}").exists() for n in names),
        timeout=60,
        interval=0.2,
    )
    started = timezone.now()
    wait_until(lambda: timezone.now() - started > timedelta(seconds=91), timeout=100, interval=1)
    Schedule.objects.update(enabled=False)

    for name in names:
        keys = Job.objects.filter(initiator=f"schedule:{name}").values_list(
            "idempotency_key", flat=True
        )
        ticks = sorted(datetime.fromisoformat(key.split(":", 2)[2]) for key in keys)
        assert len(ticks) >= 90, (name, len(ticks))
        # Consecutive seconds from the first to the last: none skipped, none twice.
        assert _seconds_between(ticks) == [1.0] * (len(ticks) - 1), name


@pytest.mark.postgres
@pytest.mark.scale
def test_workers__three_workers_fire_every_tick_exactly_once(
    pg: None, start_workers: Callable[..., WorkerProcess]
) -> None:
    make_schedule(
        "every-second",
        task_name="tests.testapp.tasks.noop",
        args=[],
        cron="* * * * * *",
        missed=CATCH_UP,
        next_fire_at=None,
    )
    for _ in range(3):
        start_workers("--concurrency", "2")
    wait_until(lambda: Job.objects.filter(state="succeeded").count() >= 6, timeout=30)
    Schedule.objects.update(enabled=False)
    keys = sorted(Job.objects.values_list("idempotency_key", flat=True))
    ticks = [datetime.fromisoformat(key.split(":", 2)[2]) for key in keys]
    assert ticks == sorted(set(ticks))  # no tick twice
    # ... and none skipped: consecutive seconds from the first to the last.
    assert [(b - a).total_seconds() for a, b in itertools.pairwise(ticks)] == [1.0] * (
        len(ticks) - 1
    )


@pytest.mark.postgres
def test_admin__validates_and_switches_schedules(pg: None) -> None:
    admin = User.objects.create_superuser("ops", "ops@example.com", "pw")
    client = Client()
    client.force_login(admin)
    url = "/admin/django_jobs/schedule/add/"
    bad = client.post(
        url,
        {
            "name": "x",
            "backend": "default",
            "task_name": "os.system",
            "args": "[]",
            "kwargs": "{}",
            "queue": "nope",
            "priority": 0,
            "tenant": "",
            "cron": "every day",
            "timezone": "Mars/Olympus",
            "enabled": "on",
            "missed": "skip",
            "max_catch_up": 10,
        },
    )
    errors = bad.context["adminform"].form.errors
    assert set(errors) == {"task_name", "queue", "cron", "timezone"}
    assert not Schedule.objects.exists()
    assert Schedule in site._registry


def schedule_form(**fields: Any) -> dict[str, Any]:
    """The admin's add form for a schedule of ``add(1, 2)``, with these fields changed."""
    return {
        "name": "s",
        "backend": "default",
        "task_name": TASK,
        "args": "[1, 2]",
        "kwargs": "{}",
        "queue": "default",
        "priority": 0,
        "tenant": "",
        "cron": "*/5 * * * *",
        "timezone": "UTC",
        "enabled": "on",
        "missed": "skip",
        "max_catch_up": 10,
        **fields,
    }


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"timezone": "America"}, "timezone", "'America' is not a known IANA timezone"),
        ({"args": '["a\\u0000b"]'}, "args", "NUL character"),
        ({"backend": "sqlite"}, "backend", "keeps its jobs in the database 'sqlite'"),
    ],
    ids=["a tzdata folder", "a NUL in args", "another database"],
)
def test_admin__refuses_a_schedule_it_could_not_keep_or_fire(
    pg: None, fields: dict[str, Any], field: str, message: str
) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))

    answer = client.post("/admin/django_jobs/schedule/add/", schedule_form(**fields))

    errors = answer.context["adminform"].form.errors
    assert list(errors) == [field] and message in " ".join(errors[field])
    assert not Schedule.objects.exists()


@pytest.mark.postgres
def test_admin__actions_disable_enable_and_run_now(pg: None) -> None:
    admin = User.objects.create_superuser("ops", "ops@example.com", "pw")
    client = Client()
    client.force_login(admin)
    row = make_schedule(next_fire_at=this_minute() - timedelta(hours=1))
    url = "/admin/django_jobs/schedule/"

    def act(action: str) -> None:
        client.post(url, {"action": action, "_selected_action": [row.pk]})

    act("disable")
    assert not Schedule.objects.get().enabled
    act("enable")
    enabled = Schedule.objects.get()
    # Switched on from its next tick: the hour spent disabled is not caught up.
    assert enabled.enabled and enabled.next_fire_at > timezone.now()  # type: ignore[operator]
    act("run_now")
    job = Job.objects.get()
    assert job.initiator == "schedule:minutely run now by ops"
    dashboard = client.get("/admin/django_jobs/job/dashboard/")
    assert b'data-schedule="minutely"' in dashboard.content


@pytest.mark.postgres
def test_admin__a_schedule_for_an_alias_that_is_not_a_jobs_backend_is_refused(pg: None) -> None:
    form = ScheduleForm(data={"name": "x", "backend": "nope"})

    form.is_valid()

    assert form.errors["backend"] == [
        "TASKS has no backend 'nope'; the configured aliases are "
        "default, fair, fast, flow, no_prefetch, sqlite."
    ]


@pytest.mark.postgres
def test_admin__run_now_of_a_schedule_whose_backend_is_gone_says_why(pg: None) -> None:
    admin = User.objects.create_superuser("ops", "ops@example.com", "pw")
    client = Client()
    client.force_login(admin)
    row = make_schedule(backend="gone")

    page = client.post(
        "/admin/django_jobs/schedule/",
        {"action": "run_now", "_selected_action": [row.pk]},
        follow=True,
    )

    assert [str(message) for message in page.context["messages"]] == [
        "minutely: TASKS has no backend 'gone'; the configured aliases are "
        "default, fair, fast, flow, no_prefetch, sqlite."
    ]
    assert not Job.objects.exists()
