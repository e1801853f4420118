"""Plain-text output for terminals and logs: aligned tables, ages, timestamps.

No colour and no box drawing, so the output pastes into a ticket and greps well.
With ``--json`` a subcommand prints one JSON document instead (``document``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart, no trailing blanks."""
    lines = [list(headers), *(list(r) for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def age(delta: timedelta) -> str:
    """A duration in one coarse unit ("45s", "12m", "3h", "9d"): enough to spot the odd one."""
    seconds = max(delta.total_seconds(), 0.0)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m"
    if seconds < 86400:
        return f"{seconds // 3600:.0f}h"
    return f"{seconds // 86400:.0f}d"


def duration(delta: timedelta | None) -> str:
    """An attempt's run time, precise enough to compare with a timeout."""
    if delta is None:
        return "-"
    return f"{delta.total_seconds():.3f}s"


def when(moment: datetime | None) -> str:
    """A timestamp in the project's time zone, with the zone spelt out."""
    if moment is None:
        return "-"
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S %Z")


def as_json(value: Any, limit: int | None = None) -> str:
    """Compact JSON, cut at ``limit`` characters with a marker so nobody mistakes it for all."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    if limit is not None and len(text) > limit:
        return f"{text[:limit]}… ({len(text)} characters; --full shows all)"
    return text


def one_line(text: str, limit: int) -> str:
    """The first line of ``text``, cut to ``limit`` characters."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


def document(value: Any) -> str:
    """The one JSON document a subcommand prints under ``--json``: times in ISO 8601, UTC."""
    return json.dumps(value, cls=DjangoJSONEncoder, indent=2, sort_keys=True, ensure_ascii=False)
