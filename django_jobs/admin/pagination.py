"""A paginator that never counts a million rows to draw one page of a hundred.

Django's changelist asks its paginator for ``count`` on every page, and on a
large jobs table an exact ``COUNT(*)`` is a sequential scan that costs more than
the page itself. So:

* an unfiltered list on PostgreSQL takes the planner's row estimate from
  ``pg_class.reltuples`` (kept current by autovacuum and ``ANALYZE``) and
  shows it as "about N";
* anything else — a filtered or searched list, a table the estimate calls
  small (below ``EXACT_BELOW``, where an estimate would look wrong), SQLite —
  counts at most ``COUNT_CAP + 1`` rows (``SELECT COUNT(*) FROM (… LIMIT
  cap + 1)``) and shows "more than N" above the cap. A stale estimate or a
  filter that matches most of the table costs a bounded scan, never a full one.

The price: with an estimate or a cap, the last page links are approximate — a
page past the real end is empty, and rows past the cap are reached by
narrowing the filter, not by paging. Deep pages are ``OFFSET`` scans; they stay
correct but get slower the deeper they go.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.core.paginator import Paginator
from django.db.models import QuerySet

from ..engine import engine_for

if TYPE_CHECKING:
    _Paginator = Paginator[Any]
else:  # Django's Paginator is generic only in its type stubs.
    _Paginator = Paginator


class EstimatedCountPaginator(_Paginator):
    EXACT_BELOW = 10_000
    COUNT_CAP = 10_000

    # How ``count`` was arrived at, for the template: "exact", "estimate" or "capped".
    count_kind = "exact"

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return len(queryset)
        if not queryset.query.where and not queryset.query.distinct:
            estimate = self._table_estimate(queryset)
            if estimate is not None and estimate >= self.EXACT_BELOW:
                self.count_kind = "estimate"
                return estimate
        # Slicing makes Django wrap the query: COUNT(*) over at most cap + 1 rows.
        bounded = queryset.order_by()[: self.COUNT_CAP + 1].count()
        if bounded > self.COUNT_CAP:
            self.count_kind = "capped"
            return self.COUNT_CAP
        return bounded

    @staticmethod
    def _table_estimate(queryset: QuerySet[Any]) -> int | None:
        table: str = queryset.model._meta.db_table
        return engine_for(queryset.db).estimated_rows(table)
