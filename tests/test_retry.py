"""The retry policy, without a database or a clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_jobs import Backoff, RetryLater
from django_jobs.retry import (
    Decision,
    RetryPolicy,
    Verdict,
    budget_window,
    within_budget,
)


def policy(**overrides: object) -> RetryPolicy:
    options: dict[str, object] = {"max_attempts": 5, "backoff": Backoff(base=1.0, cap=10.0)}
    options.update(overrides)
    return RetryPolicy(**options)  # type: ignore[arg-type]


def test_backoff__ceiling_doubles_per_attempt_until_the_cap() -> None:
    backoff = Backoff(base=1.0, cap=10.0)
    assert [backoff.ceiling(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_backoff__full_jitter_spans_zero_to_the_ceiling() -> None:
    backoff = Backoff(base=2.0, cap=100.0)
    assert backoff.delay(3, rand=lambda: 0.0) == 0.0
    assert backoff.delay(3, rand=lambda: 0.5) == 4.0
    assert backoff.delay(3, rand=lambda: 0.999) == pytest.approx(7.992)


def test_backoff__huge_attempt_numbers_stay_at_the_cap() -> None:
    assert Backoff(base=1.0, cap=60.0).ceiling(10_000) == 60.0


def test_backoff__rejects_a_cap_below_the_base() -> None:
    with pytest.raises(ValueError, match="cap must not be below"):
        Backoff(base=5.0, cap=1.0)


def test_backoff__rejects_a_base_that_is_not_a_number() -> None:
    with pytest.raises(ValueError, match="base must be a number of seconds, not NaN"):
        Backoff(base=float("nan"), cap=10.0)


def test_decide__retries_a_retryable_error_with_backoff() -> None:
    decision = policy().decide(ConnectionError("down"), attempt=2, rand=lambda: 0.5)
    assert decision == Decision(Verdict.RETRY, 1.0)


def test_decide__exhausts_on_the_last_attempt() -> None:
    assert policy().decide(ConnectionError(), attempt=5) == Decision(Verdict.EXHAUSTED)


def test_decide__gives_up_on_listed_errors_even_with_attempts_left() -> None:
    decision = policy(give_up_on=(KeyError,)).decide(KeyError("x"), attempt=1)
    assert decision == Decision(Verdict.GIVE_UP)


def test_decide__give_up_on_wins_over_retry_on() -> None:
    decision = policy(retry_on=(LookupError,), give_up_on=(KeyError,)).decide(
        KeyError("x"), attempt=1
    )
    assert decision.verdict is Verdict.GIVE_UP


def test_decide__gives_up_on_errors_outside_retry_on() -> None:
    decision = policy(retry_on=(ConnectionError,)).decide(ValueError("bad input"), attempt=1)
    assert decision.verdict is Verdict.GIVE_UP


@pytest.mark.parametrize("delay", [-1.0, float("nan"), float("inf"), 1e12])
def test_retry_later__refuses_a_delay_no_due_time_can_be_worked_out_for(delay: float) -> None:
    with pytest.raises(ValueError, match=r"^RetryLater delay must be a number of seconds from 0"):
        RetryLater(delay)


@pytest.mark.parametrize("cap", [float("nan"), float("inf"), 1e12])
def test_backoff__refuses_a_cap_past_a_hundred_years(cap: float) -> None:
    with pytest.raises(ValueError, match=r"^Backoff cap must be at most 3153600000 seconds"):
        Backoff(base=1.0, cap=cap)


def test_decide__retry_later_uses_its_own_delay() -> None:
    decision = policy(retry_on=(ConnectionError,)).decide(RetryLater(42.0), attempt=1)
    assert decision == Decision(Verdict.RETRY, 42.0)


def test_decide__retry_later_on_the_last_attempt_exhausts() -> None:
    assert policy().decide(RetryLater(1.0), attempt=5) == Decision(Verdict.EXHAUSTED)


START = datetime(2026, 1, 1, tzinfo=UTC)


def test_budget_window__is_the_fixed_window_holding_the_moment() -> None:
    assert budget_window(START + timedelta(seconds=130), 60.0) == START + timedelta(seconds=120)


def test_within_budget__retries_within_the_budget_keep_their_backoff() -> None:
    at = START + timedelta(seconds=5)
    assert within_budget(at, START, count=3, budget=3, window=60.0, jitter=0.5) == at


def test_within_budget__the_nth_over_the_budget_waits_ceil_n_over_budget_windows() -> None:
    at = START + timedelta(seconds=5)
    first_over = within_budget(at, START, count=4, budget=3, window=60.0, jitter=0.5)
    fourth_over = within_budget(at, START, count=7, budget=3, window=60.0, jitter=0.0)
    assert first_over == START + timedelta(seconds=90)
    assert fourth_over == START + timedelta(seconds=120)


def test_within_budget__never_earlier_than_the_backoff() -> None:
    at = START + timedelta(seconds=500)
    assert within_budget(at, START, count=4, budget=3, window=60.0, jitter=0.0) == at
