"""The fair queues' clocks in the database (the policy itself is ``fairness.py``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from .. import fairness
from ..models import FairClock


def clocks(db: str, queue: str, tenants: Iterable[str]) -> dict[str, fairness.Clock]:
    """The clocks of these tenants of ``queue`` (tenants never claimed have none)."""
    rows = FairClock.objects.using(db).filter(queue=queue, tenant__in=set(tenants))
    return {row.tenant: fairness.Clock(row.start, row.finish) for row in rows}


def record(
    db: str, queue: str, served: Mapping[str, tuple[int, float]], weights: Mapping[str, float]
) -> None:
    """Add what a claim gave each tenant to its clock (see ``fairness.advance``).

    The ORM way, for SQLite: it serialises writers, so reading the clocks and
    writing them back in one transaction is an upsert.
    """
    tenants = sorted(served)  # one lock order for every worker: no deadlock
    weight = [float(weights.get(tenant, 1.0)) for tenant in tenants]
    now = timezone.now()
    with transaction.atomic(using=db, savepoint=False):  # the claim's, when in one
        known = clocks(db, queue, tenants)
        for tenant, w in zip(tenants, weight, strict=True):
            claims, start = served[tenant]
            moved = fairness.advance(known.get(tenant), start, claims, w)
            values = {"start": moved.start, "finish": moved.finish, "weight": w, "updated_at": now}
            mine = FairClock.objects.using(db).filter(queue=queue, tenant=tenant)
            if tenant in known:
                mine.update(claims=F("claims") + claims, **values)
            else:
                FairClock.objects.using(db).create(
                    queue=queue, tenant=tenant, claims=claims, **values
                )
