"""The fair queue's policy (fairness.py): pure arithmetic, then its clocks in the database."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

from django_jobs import fairness
from django_jobs.fairness import Clock, Head

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def heads(tenant: str, count: int, priority: int = 0) -> list[Head]:
    return [
        Head(uuid.uuid4(), tenant, priority, T0 + timedelta(seconds=n), None) for n in range(count)
    ]


def tenants_in_order(
    ready: list[Head], clocks: dict[str, Clock], weights: dict[str, float] | None = None
) -> list[str]:
    return [head.tenant for head, _ in fairness.order(ready, clocks, weights or {})]


def tenants_and_bases(ready: list[Head], clocks: dict[str, Clock]) -> list[tuple[str, float]]:
    return [(head.tenant, base) for head, base in fairness.order(ready, clocks, {})]


def test_order__the_tenant_that_received_less_goes_first() -> None:
    clocks = {"a": Clock(start=10, finish=11), "b": Clock(start=9, finish=10)}
    ranked = tenants_in_order(heads("a", 3) + heads("b", 3), clocks)
    assert (ranked[0], Counter(ranked[:5])) == ("b", {"b": 3, "a": 2})


def test_order__a_deficit_within_the_queue_time_is_forgiven() -> None:
    """Only a lag behind the latest start (at most a batch, from concurrent claims) is lost."""
    clocks = {"a": Clock(start=20, finish=21), "b": Clock(start=5, finish=6)}
    assert tenants_and_bases(heads("a", 1) + heads("b", 1), clocks) == [("b", 20), ("a", 21)]


def test_order__a_new_tenant_starts_level_with_the_queue_not_at_zero() -> None:
    clocks = {"a": Clock(start=599, finish=600)}
    assert tenants_and_bases(heads("a", 2) + heads("new", 2), clocks) == [
        ("new", 599),
        ("a", 600),
        ("new", 599),
        ("a", 600),
    ]


def test_order__a_tenant_back_from_idle_cannot_cash_in_the_time_it_was_away() -> None:
    clocks = {"a": Clock(start=999, finish=1000), "back": Clock(start=2, finish=3)}
    assert tenants_and_bases(heads("a", 2) + heads("back", 2), clocks) == [
        ("back", 999),
        ("a", 1000),
        ("back", 999),
        ("a", 1000),
    ]


def test_order__weights_share_turns_in_proportion() -> None:
    ranked = tenants_in_order(heads("gold", 30) + heads("basic", 30), {}, {"gold": 3, "basic": 1})
    assert Counter(ranked[:20]) == {"gold": 15, "basic": 5}


def test_order__within_a_tenant_priority_then_age_and_ties_across_tenants_go_to_priority() -> None:
    urgent = heads("a", 1, priority=10)
    ready = heads("a", 2) + urgent + heads("b", 2, priority=5)
    ranked = [head for head, _ in fairness.order(ready, {}, {})]
    assert ranked[:2] == [urgent[0], ready[3]]  # both first turns; the higher priority wins


def test_advance__counts_from_the_base_or_from_a_clock_moved_on_meanwhile() -> None:
    assert fairness.advance(None, 50.0, 4, 2.0) == Clock(start=51.5, finish=52.0)
    assert fairness.advance(Clock(10, 11), 50.0, 4, 2.0) == Clock(start=51.5, finish=52.0)
    assert fairness.advance(Clock(59, 60), 50.0, 4, 2.0) == Clock(start=61.5, finish=62.0)


def test_served__counts_each_tenants_jobs_with_the_base_its_ranks_used() -> None:
    claimed = [("a", 4.0), ("b", 2.0), ("a", 4.0)]
    assert fairness.served(claimed) == {"a": (2, 4.0), "b": (1, 2.0)}
