"""Arguments and results: what a task receives is what its caller passed, equal and same type.

Plain JSON plus UUID, datetime, date, time and Decimal, nested anywhere, in
the stored form ``django_jobs/codec.py`` defines. The codec is checked on its
own (a property test over a real JSON round trip), then end to end on
PostgreSQL and on SQLite: enqueue, claim, the worker's runner, finish,
``get_result()``; and through real ``runworkers`` processes after
``enqueue_many``'s COPY.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.utils import timezone as django_timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_jobs import JobState, enqueue_many
from django_jobs.attempt import AttemptControl
from django_jobs.backend import jobs_backend
from django_jobs.codec import from_json, to_json
from django_jobs.exceptions import (
    ArgumentsNotJSONError,
    PayloadNotDecodableError,
    ResultNotJSONError,
)
from django_jobs.models import Job
from django_jobs.payload import check_result, encode
from django_jobs.retry import Verdict
from django_jobs.values import WorkerIdentity
from django_jobs.worker.runner import TaskRunner
from tests.testapp import tasks

PARIS = ZoneInfo("Europe/Paris")
ME = WorkerIdentity(uuid.uuid4(), "test:arguments")


def assert_same(got: Any, expected: Any, where: str = "value") -> None:
    """Equal, of the same type, and alike in what ``==`` does not look at."""
    assert type(got) is type(expected), f"{where}: {type(got)} is not {type(expected)}"
    if isinstance(expected, list):
        assert len(got) == len(expected), where
        for index, (g, e) in enumerate(zip(got, expected, strict=True)):
            assert_same(g, e, f"{where}[{index}]")
    elif isinstance(expected, dict):
        assert set(got) == set(expected), where  # PostgreSQL's jsonb orders keys its own way
        for key in expected:
            assert_same(got[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, Decimal):  # Decimal("1.10") == Decimal("1.1")
        assert got.as_tuple() == expected.as_tuple(), where
    elif isinstance(expected, float):  # 0.0 == -0.0
        assert repr(got) == repr(expected), where
    elif isinstance(expected, datetime | time):  # aware ones compare by instant
        assert got == expected, where
        assert got.replace(tzinfo=None) == expected.replace(tzinfo=None), where
        assert (got.tzinfo, got.utcoffset()) == (expected.tzinfo, expected.utcoffset()), where
    else:
        assert got == expected, where


# -- strategies -------------------------------------------------------------------

fixed_offsets = st.integers(min_value=-86399, max_value=86399).map(
    lambda seconds: timezone(timedelta(seconds=seconds))
)
tagged = (
    st.uuids()
    | st.datetimes(timezones=st.timezones() | fixed_offsets)
    | st.dates()
    | st.times(timezones=st.none() | fixed_offsets)
    | st.decimals(allow_nan=False)
)
# Keys that look like tags, so that the escaping is exercised, not just possible.
tag_like = st.sampled_from(["$uuid", "$dict", "$date", "$decimal", "$later", "$"])


def values(text: st.SearchStrategy[str], floats: st.SearchStrategy[float]) -> Any:
    scalars = st.none() | st.booleans() | st.integers() | floats | text | tagged
    keys = text | tag_like
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=3),
        max_leaves=12,
    )


any_values = values(st.text(), st.floats(allow_nan=False, allow_infinity=False))
# What a jsonb column keeps as it was given, whatever the encoding: no NUL or
# lone surrogate in text (jsonb refuses them), and no float it would turn into an
# int (1e+16) or whose sign it drops (-0.0).
column_values = values(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")),
    st.floats(allow_nan=False, allow_infinity=False).filter(
        lambda f: "e" not in repr(f) and repr(f) != "-0.0"
    ),
)
kwarg_names = st.from_regex(r"[a-z_$][a-z0-9_$]{0,6}", fullmatch=True).filter(lambda k: k != "self")


# -- the codec on its own -------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(any_values)
def test_codec__every_value_comes_back_equal_and_of_the_same_type(value: Any) -> None:
    stored = json.loads(encode(to_json(value, "value")))
    assert_same(from_json(stored, "value"), value)


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        (
            uuid.UUID("1b4e28ba-2fa1-11d2-883f-0016d3cca427"),
            {"$uuid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427"},
        ),
        (
            datetime(2025, 1, 31, 9, 30, 0, 5, tzinfo=UTC),
            {"$datetime": "2025-01-31T09:30:00.000005+00:00"},
        ),
        (
            datetime(2025, 7, 1, 12, tzinfo=PARIS),
            {"$datetime": "2025-07-01T12:00:00+02:00[Europe/Paris]"},
        ),
        (date(2025, 1, 31), {"$date": "2025-01-31"}),
        (time(9, 0, 0, 1), {"$time": "09:00:00.000001"}),
        (
            time(9, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
            {"$time": "09:00:00-05:30"},
        ),
        (Decimal("1.10"), {"$decimal": "1.10"}),
        (Decimal("-0E-7"), {"$decimal": "-0E-7"}),
        (Decimal("-Infinity"), {"$decimal": "-Infinity"}),
        ({"$uuid": "mine"}, {"$dict": {"$uuid": "mine"}}),
        ({"$ref": Decimal("2")}, {"$dict": {"$ref": {"$decimal": "2"}}}),
        ({"$a": 1, "$b": 2}, {"$a": 1, "$b": 2}),
        ({"price": "$5"}, {"price": "$5"}),
    ],
)
def test_codec__stores_the_documented_form(value: Any, stored: Any) -> None:
    assert to_json(value, "value") == stored
    assert_same(from_json(stored, "value"), value)


def test_codec__a_repeated_hour_keeps_its_fold() -> None:
    # 02:30 happens twice in Paris on 2025-10-26; fold=1 is the second one, in winter time.
    second = datetime(2025, 10, 26, 2, 30, tzinfo=PARIS, fold=1)
    stored = to_json(second, "when")
    assert stored == {"$datetime": "2025-10-26T02:30:00+01:00[Europe/Paris]"}
    back = from_json(stored, "when")
    assert (back.fold, back.utcoffset()) == (1, timedelta(hours=1))


def test_codec__a_dict_tagged_in_its_own_escape_comes_back_as_it_was() -> None:
    mine = {"$dict": {"$uuid": "not a uuid"}}
    stored = to_json(mine, "value")
    assert stored == {"$dict": {"$dict": {"$dict": {"$uuid": "not a uuid"}}}}
    assert from_json(stored, "value") == mine


class Timestamp(datetime):
    """Like pandas' Timestamp: a datetime subclass."""


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            datetime(2025, 1, 31, 9, 30),
            r"^args\[0\] is a naive datetime \(2025-01-31T09:30:00\); make it timezone-aware "
            r"\(django.utils.timezone.make_aware\(value\), or tzinfo=...\)",
        ),
        (
            datetime(2025, 1, 31, tzinfo=timezone(timedelta(hours=1), "CET")),
            r"^args\[0\] is a datetime with the tzinfo .*CET.*use a zoneinfo.ZoneInfo or an "
            r"unnamed datetime.timezone",
        ),
        (
            time(9, tzinfo=timezone(timedelta(microseconds=1))),
            r"^args\[0\] is a time whose UTC offset \(0:00:00.000001\) has a fraction of a "
            r"second",
        ),
        (
            time(9, tzinfo=PARIS),
            r"^args\[0\] is a time in the zone Europe/Paris, whose offset depends on a date",
        ),
        (
            Decimal("NaN"),
            r"^args\[0\] is Decimal\('NaN'\), which is not equal to itself",
        ),
        (Decimal("sNaN"), r"^args\[0\] is Decimal\('sNaN'\)"),
        (
            Timestamp(2025, 1, 31, tzinfo=UTC),
            r"^args\[0\] is a Timestamp, a subclass of datetime that would come back as a "
            r"plain datetime",
        ),
        ((1, 2), r"^args\[0\] is a tuple, .*\(JSON has arrays but no tuples; pass a list\)"),
        ({1, 2}, r"^args\[0\] is a set, .*\(pass a list, e.g. sorted\(the_set\)\)"),
        (b"\x00", r"^args\[0\] is a bytes, .*\(decode it to str, or base64-encode it\)"),
        (timedelta(seconds=3), r"^args\[0\] is a timedelta, .*\(pass its total_seconds\(\)\)"),
        (float("inf"), r"^args\[0\] is inf, which JSON cannot carry\.$"),
        ({2: "b"}, r"^args\[0\] has the key 2 \(int\); JSON object keys are strings"),
        (
            [{"at": [1, {"when": datetime(2025, 1, 1)}]}],
            r"^args\[0\]\[0\]\['at'\]\[1\]\['when'\] is a naive datetime",
        ),
    ],
)
def test_codec__refuses_what_would_not_come_back_saying_where_and_what_to_pass(
    value: Any, message: str
) -> None:
    with pytest.raises(ArgumentsNotJSONError, match=message):
        to_json([value], "args")


@pytest.mark.parametrize(
    ("stored", "message"),
    [
        (
            [1, {"a": {"$money": "1 EUR"}}],
            r"^args\[1\]\['a'\] is tagged '\$money', which this version of django-jobs does "
            r"not know",
        ),
        ([{"$uuid": "nope"}], r"^args\[0\] is tagged '\$uuid' but holds 'nope': "),
        ([{"$date": 20250131}], r"^args\[0\] is tagged '\$date' but holds 20250131, not a string"),
        ([{"$datetime": "2025-01-31T09:30:00"}], r"^args\[0\] is tagged '\$datetime' but holds"),
        ([{"$datetime": "2025-01-31T09:30:00+01:00[Mars/Olympus]"}], r"'\$datetime' but holds"),
        ([{"$decimal": "NaN"}], r"^args\[0\] is tagged '\$decimal' but holds 'NaN'"),
    ],
)
def test_codec__refuses_to_decode_an_unknown_tag_or_a_bad_value(stored: Any, message: str) -> None:
    with pytest.raises(PayloadNotDecodableError, match=message):
        from_json(stored, "args")


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (["ok", {"k": ["a\x00b"]}], {}, r"^args\[1\]\['k'\]\[0\] contains a NUL character"),
        ([], {"note": {"a\x00": 1}}, r"^kwargs\['note'\] \(its key 'a\\x00'\) contains a NUL"),
        (["a" + chr(0xD800)], {}, r"^args\[0\] contains a lone surrogate \('\\ud800'\)"),
    ],
)
def test_arguments__text_postgresql_cannot_store_is_refused_naming_where_and_nothing_is_written(
    alias: str, args: list[Any], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ArgumentsNotJSONError, match=message + r".*PostgreSQL cannot store"):
        tasks.echo.using(backend=alias).enqueue(*args, **kwargs)
    assert Job.objects.using(jobs_backend(alias).db).count() == 0


def test_arguments__text_that_only_looks_unstorable_in_its_json_is_kept(alias: str) -> None:
    # A backslash then "u0000" is written \\u0000; an emoji as a surrogate pair.
    texts = ["C:\\u0000\\dir", "ok \N{GRINNING FACE}"]
    result = tasks.echo.using(backend=alias).enqueue(*texts)
    job = Job.objects.using(jobs_backend(alias).db).get(id=result.id)
    assert from_json(job.args, "args") == texts


def test_check_result__a_nul_character_is_refused_as_not_storable() -> None:
    with pytest.raises(ResultNotJSONError, match=r"^the return value\['out'\] contains a NUL"):
        check_result({"out": "a\x00b"}, 1_000)


def test_check_result__returns_the_stored_form_and_names_the_return_value() -> None:
    assert check_result({"total": Decimal("9.90")}, 1000) == {"total": {"$decimal": "9.90"}}
    with pytest.raises(ResultNotJSONError, match=r"^the return value\['at'\] is a naive datetime"):
        check_result({"at": datetime(2025, 1, 1)}, 1000)


# -- end to end, on both databases ------------------------------------------------------


def run_one(alias: str) -> None:
    """Claim the one queued job, run it with the worker's runner, and record the outcome."""
    backend = jobs_backend(alias)
    [claimed] = backend.engine.claim(ME, ["default"], 1)
    report = TaskRunner(backend, ME.id).run(claimed, AttemptControl(claimed.timeout))
    backend.engine.finish(ME.id, [report])


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    args=st.lists(column_values, max_size=4),
    kwargs=st.dictionaries(kwarg_names, column_values, max_size=3),
)
def test_arguments__the_task_receives_and_returns_them_equal_and_of_the_same_type(
    alias: str, args: list[Any], kwargs: dict[str, Any]
) -> None:
    backend = jobs_backend(alias)
    Job.objects.using(backend.db).all().delete()  # what an earlier example left, if it failed
    enqueued = tasks.echo.using(backend=alias).enqueue(*args, **kwargs)

    run_one(alias)

    result = backend.get_result(enqueued.id)
    assert result.state == JobState.SUCCEEDED, result.last_error
    assert_same(result.return_value, {"args": args, "kwargs": kwargs})
    assert_same((enqueued.args, enqueued.kwargs), (args, kwargs), "enqueued")
    assert_same((result.args, result.kwargs), (args, kwargs), "stored")


MIXED = [
    uuid.UUID("1b4e28ba-2fa1-11d2-883f-0016d3cca427"),
    datetime(2025, 10, 26, 2, 30, 0, 123456, tzinfo=PARIS, fold=1),
    date(2025, 1, 31),
    time(23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=5, minutes=45))),
    Decimal("1.10"),
    {"$uuid": "a dict of mine", "lines": [Decimal("0.01"), {"$dict": 1}]},
]


def test_arguments__enqueue_many_and_a_real_worker_keep_them(
    alias: str, run_burst: Callable[..., str]
) -> None:
    results = enqueue_many(
        tasks.echo.using(backend=alias),
        [(MIXED, {"when": MIXED[1], "n": n}) for n in range(3)],
    )

    run_burst("--backend", alias)

    backend = jobs_backend(alias)
    for n, enqueued in enumerate(results):
        result = backend.get_result(enqueued.id)
        assert result.state == JobState.SUCCEEDED, result.last_error
        assert_same(result.return_value, {"args": MIXED, "kwargs": {"when": MIXED[1], "n": n}})


def test_arguments__a_model_instance_is_refused_and_nothing_is_written(alias: str) -> None:
    user = User(pk=7, username="ada")
    with pytest.raises(
        ArgumentsNotJSONError,
        match=r"^args\[0\] is a User model instance; pass its primary key \(user.pk\) "
        r"and fetch it in the task\.$",
    ):
        tasks.echo.using(backend=alias).enqueue(user)
    assert Job.objects.using(jobs_backend(alias).db).count() == 0


def test_arguments__nested_too_deep_to_store_are_refused_and_nothing_is_written(
    alias: str,
) -> None:
    deep: list[Any] = []
    for _ in range(600):
        deep = [deep]
    with pytest.raises(ArgumentsNotJSONError, match="nested too deep to store"):
        tasks.echo.using(backend=alias).enqueue(deep)
    assert Job.objects.using(jobs_backend(alias).db).count() == 0


def test_arguments__a_queryset_is_refused_with_what_to_pass(alias: str) -> None:
    with pytest.raises(
        ArgumentsNotJSONError,
        match=r"^kwargs\['users'\] is a QuerySet of User; pass a list of primary keys",
    ):
        tasks.echo.using(backend=alias).enqueue(users=User.objects.none())


def test_arguments__a_row_with_an_unknown_tag_fails_without_calling_the_task(alias: str) -> None:
    backend = jobs_backend(alias)
    now = django_timezone.now()
    job = Job.objects.using(backend.db).create(
        task_name="tests.testapp.tasks.echo",
        args=["fine", {"$money": "1 EUR"}],
        max_attempts=3,
        run_after=now,
        enqueued_at=now,
        updated_at=now,
    )
    [claimed] = backend.engine.claim(ME, ["default"], 1)

    report = TaskRunner(backend, ME.id).run(claimed, AttemptControl(claimed.timeout))

    assert report.error_type == "django_jobs.exceptions.PayloadNotDecodableError"
    assert report.error_message.startswith("args[1] is tagged '$money', which this version")
    assert report.decision is not None and report.decision.verdict is Verdict.GIVE_UP
    backend.engine.finish(ME.id, [report])
    job.refresh_from_db(using=backend.db)
    assert (job.state, job.attempts) == (JobState.FAILED, 1)


def test_cli_enqueue__decodes_the_stored_form_given_on_the_command_line(pg: None) -> None:
    out = io.StringIO()
    given = '[{"$uuid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427"}, {"$decimal": "1.10"}]'

    call_command(
        "jobs", "enqueue", "tests.testapp.tasks.echo", "--args", given, "--quiet", stdout=out
    )

    result = jobs_backend("default").get_result(out.getvalue().strip())
    assert_same(result.args, [uuid.UUID("1b4e28ba-2fa1-11d2-883f-0016d3cca427"), Decimal("1.10")])


def test_cli_enqueue__refuses_an_unknown_tag_and_writes_nothing(pg: None) -> None:
    with pytest.raises(CommandError, match=r"^--kwargs\['at'\] is tagged '\$when', which"):
        call_command(
            "jobs", "enqueue", "tests.testapp.tasks.echo", "--kwargs", '{"at": {"$when": "now"}}'
        )
    assert Job.objects.count() == 0
