"""``manage.py jobs``: input it cannot use is refused up front, naming the option.

Out-of-range numbers, JSON nested too deep, and text PostgreSQL cannot hold
(a NUL character, a lone surrogate) each end the command with a CommandError
that names the option and the problem, before anything is written; none
surfaces as an OverflowError, a RecursionError or a database error.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_jobs.models import Job, JobEvent, QueueEvent, QueueState
from django_jobs.states import JobState
from tests.test_cli import ADD, jobs, jobs_failing, jobs_process, make_job

pytestmark = pytest.mark.postgres

A_HUNDRED_YEARS = 100 * 365 * 86400


# -- numbers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--delay", "1e12"),
        ("--delay", "1e20"),
        ("--debounce", "1e12"),
        ("--unique-for", "1e12"),
    ],
)
def test_enqueue__seconds_over_a_hundred_years_are_refused_and_write_nothing(
    pg: None, option: str, value: str
) -> None:
    error, _, _ = jobs_failing(
        "enqueue", ADD, "--args", "[1, 2]", "--unique-key", "k", option, value
    )

    assert error == (
        f"Error: argument {option}: {value} must be at most 3153600000 seconds (a hundred years)."
    )
    assert Job.objects.count() == 0


def test_enqueue__a_delay_of_a_hundred_years_is_accepted(pg: None) -> None:
    before = timezone.now()

    jobs("enqueue", ADD, "--args", "[1, 2]", "--delay", str(A_HUNDRED_YEARS), "--quiet")

    run_after = Job.objects.get().run_after
    assert run_after - before >= timedelta(seconds=A_HUNDRED_YEARS)


def test_enqueue__a_window_shorter_than_a_microsecond_is_refused_and_writes_nothing(
    pg: None,
) -> None:
    error, _, _ = jobs_failing("enqueue", ADD, "--unique-key", "k", "--unique-for", "1e-300")

    assert error == "Error: argument --unique-for: 1e-300 seconds is shorter than a microsecond."
    assert Job.objects.count() == 0


@pytest.mark.parametrize("days", ["1e6", "1e9"])
def test_prune__an_age_over_a_hundred_years_is_refused_and_deletes_nothing(
    pg: None, days: str
) -> None:
    make_job(JobState.SUCCEEDED, finished_seconds_ago=30 * 86400)

    error, _, _ = jobs_failing("prune", "--older-than", days)

    assert error == (
        f"Error: argument --older-than: {days} must be at most 36500 days (a hundred years)."
    )
    assert Job.objects.count() == 1


def test_prune__an_age_shorter_than_a_microsecond_is_refused_and_deletes_nothing(
    pg: None,
) -> None:
    make_job(JobState.SUCCEEDED, finished_seconds_ago=30 * 86400)

    error, _, _ = jobs_failing("prune", "--older-than", "1e-300")

    assert error == "Error: argument --older-than: 1e-300 days is shorter than a microsecond."
    assert Job.objects.count() == 1


def test_list__a_limit_past_the_largest_whole_number_is_refused(pg: None) -> None:
    error, _, _ = jobs_failing("list", "--limit", "99999999999999999999")

    assert error == "Error: argument --limit: 99999999999999999999 must be at most 2147483647."


# -- JSON ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "document"),
    [
        ("--args", "[" * 5000 + "]" * 5000),
        ("--kwargs", '{"a": ' + "[" * 5000 + "]" * 5000 + "}"),
    ],
)
def test_enqueue__json_nested_too_deep_to_decode_is_refused_and_writes_nothing(
    pg: None, option: str, document: str
) -> None:
    error, _, _ = jobs_failing("enqueue", ADD, option, document)

    assert error == f"{option} is nested too deep to decode."
    assert Job.objects.count() == 0


def test_enqueue__arguments_nested_too_deep_to_encode_are_refused_and_write_nothing(
    pg: None,
) -> None:
    error, _, _ = jobs_failing("enqueue", ADD, "--args", "[" * 600 + "]" * 600)

    assert error.startswith(
        "Enqueue refused, nothing written: The arguments are nested too deep to store"
    )
    assert Job.objects.count() == 0


# -- text ----------------------------------------------------------------------------


def refused_as_nul(option: str) -> str:
    """What the command says of ``option`` given "a\\x00"."""
    return (
        f"Error: argument {option}: 'a\\x00' is not valid text: "
        "it contains a NUL character (\\x00)."
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "--queue", "a\x00"],
        ["list", "--task", "a\x00"],
        ["list", "--tenant", "a\x00"],
        ["cancel", "--queue", "a\x00", "--yes"],
        ["discard", "--tenant", "a\x00", "--yes", "--note", "x"],
        ["health", "--host", "a\x00"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_lookup__a_nul_character_is_refused_naming_the_option_and_changes_nothing(
    pg: None, argv: list[str]
) -> None:
    job = make_job(tenant="a")

    error, _, _ = jobs_failing(*argv)

    assert error == refused_as_nul(argv[1])
    job.refresh_from_db()
    assert (job.state, JobEvent.objects.count()) == (JobState.QUEUED, 0)


@pytest.mark.parametrize("option", ["--actor", "--note"])
def test_verb__an_actor_or_note_with_a_nul_character_is_refused_and_changes_nothing(
    pg: None, option: str
) -> None:
    job = make_job()

    error, _, _ = jobs_failing("cancel", str(job.id), option, "a\x00")

    assert error == refused_as_nul(option)
    job.refresh_from_db()
    assert (job.state, JobEvent.objects.count()) == (JobState.QUEUED, 0)


@pytest.mark.parametrize("option", ["--actor", "--note"])
def test_pause__an_actor_or_note_with_a_nul_character_is_refused_and_records_nothing(
    pg: None, option: str
) -> None:
    error, _, _ = jobs_failing("pause", "default", option, "a\x00")

    assert error == refused_as_nul(option)
    assert (QueueState.objects.count(), QueueEvent.objects.count()) == (0, 0)


@pytest.mark.parametrize(
    "option", ["--queue", "--tenant", "--idempotency-key", "--unique-key", "--actor"]
)
def test_enqueue__an_option_with_a_nul_character_is_refused_and_writes_nothing(
    pg: None, option: str
) -> None:
    error, _, _ = jobs_failing("enqueue", ADD, "--args", "[1, 2]", option, "a\x00")

    assert error == refused_as_nul(option)
    assert Job.objects.count() == 0


def test_list__a_lone_surrogate_is_refused_as_not_valid_text(pg: None) -> None:
    error, _, _ = jobs_failing("list", "--task", "\ud800")

    assert error == (
        "Error: argument --task: '\\ud800' is not valid text: "
        "it contains a lone surrogate ('\\ud800')."
    )


def test_exit_code__2_for_an_argument_of_bytes_that_are_not_utf8(pg: None) -> None:
    # The shell's b"\xff" reaches Python as the lone surrogate "\udcff".
    done = jobs_process("list", "--queue", "\udcff")

    assert done.returncode == 2
    assert done.stderr.endswith(
        "error: argument --queue: '\\udcff' is not valid text: "
        "it contains a lone surrogate ('\\udcff').\n"
    )
