"""Per-key limits, decided without a database: which candidates may start now."""

from __future__ import annotations

import uuid

from django_jobs.limits import KeyCounts, within_key_limits

IDS = [uuid.UUID(int=n) for n in range(10)]


def test_at_limit__names_keys_full_by_concurrency_or_by_rate() -> None:
    counts = KeyCounts(running={"a": 2, "b": 1}, started={"c": 5, "d": 4})
    assert counts.at_limit(2, (5, 1.0)) == ["a", "c"]
    assert counts.at_limit(None, None) == []


def test_within_key_limits__takes_candidates_in_order_up_to_the_budget_without_limits() -> None:
    candidates = [(job_id, "a") for job_id in IDS]
    assert within_key_limits(candidates, None, None, 3, KeyCounts({}, {})) == IDS[:3]


def test_within_key_limits__skips_a_key_once_its_running_jobs_reach_the_limit() -> None:
    candidates = [(IDS[0], "a"), (IDS[1], "a"), (IDS[2], "b"), (IDS[3], None), (IDS[4], "a")]
    chosen = within_key_limits(candidates, 2, None, 10, KeyCounts({"a": 1}, {}))
    assert chosen == [IDS[0], IDS[2], IDS[3]]


def test_within_key_limits__counts_starts_in_the_rate_window_per_key() -> None:
    candidates = [(IDS[0], "a"), (IDS[1], "a"), (IDS[2], "a"), (IDS[3], "b")]
    chosen = within_key_limits(candidates, None, (2, 1.0), 10, KeyCounts({}, {"a": 1}))
    assert chosen == [IDS[0], IDS[3]]
