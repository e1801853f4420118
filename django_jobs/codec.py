"""The stored form of arguments and results: JSON, plus five tagged Python types.

A job row holds its arguments and its result as JSON, and the task must get
back exactly what the caller passed: equal, and of the same type. Plain JSON
values (``str``, ``int``, ``float``, ``bool``, ``None``, ``list``, ``dict``
with string keys) are stored as they are. Five more types are stored as a
*tag*, a JSON object with one key that starts with ``$``:

=============  =========================================  ===========================
type           stored as                                  kept exactly
=============  =========================================  ===========================
``UUID``       ``{"$uuid": "1b4e28ba-2fa1-…"}``           the 128 bits
``datetime``   ``{"$datetime": "2025-03-30T02:30:00.5+   instant, wall time, offset,
               01:00[Europe/Paris]"}``                    zone (ZoneInfo or fixed)
``date``       ``{"$date": "2025-03-30"}``                the day
``time``       ``{"$time": "09:00:00.000001+02:00"}``     wall time, fixed offset
``Decimal``    ``{"$decimal": "1.10"}``                   sign, digits, exponent
=============  =========================================  ===========================

A user's own dict with one key that starts with ``$`` would read as a tag,
so it is stored wrapped: ``{"$dict": {"$ref": 1}}``. Decoding never reads a
tag inside that wrapper's top level, so every dict comes back as it went in.

What is refused, and why (each with a message that says what to pass
instead): a naive ``datetime`` (which instant is it?); a ``datetime`` whose
tzinfo is neither a ``zoneinfo.ZoneInfo`` nor an unnamed
``datetime.timezone`` with a whole-second offset (it would come back as
something else); a ``time``
in a ``ZoneInfo`` (its offset depends on a date it does not have);
``Decimal`` NaN (not equal to itself, and a signalling NaN raises when
compared); subclasses of the tagged types (they would come back as the base
type); model instances and querysets (pass primary keys); tuples, sets,
bytes and everything else JSON cannot carry.

Limits, honestly: a ``datetime`` in a ZoneInfo is rebuilt from its wall time
and offset with the worker's zone database; if that database's rules for
the zone changed since the enqueue, the instant is kept and the wall time
follows the new rules. A ``time``'s ``fold`` is not kept (without a date it
means nothing). ``str`` and ``int`` subclasses (``StrEnum``, ``IntEnum``)
are accepted as before and come back as ``str`` and ``int``.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterable
from datetime import date, datetime, time, timezone, tzinfo
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.db.models import Model, QuerySet

from .exceptions import ArgumentsNotJSONError, PayloadNotDecodableError

ESCAPE = "$dict"


class _Problem(Exception):
    """What is wrong with a value; its path is collected on the way out of the walk."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.where: list[str] = []

    def message(self, root: str) -> str:
        return f"{root}{''.join(reversed(self.where))}{self.reason}"


# -- encoding ---------------------------------------------------------------------


def to_json(value: Any, root: str, error: type[Exception] = ArgumentsNotJSONError) -> Any:
    """``value`` in its stored form; raise ``error`` saying where and what is wrong.

    ``root`` names the value in that message (``args[0]``, ``the return value``).
    """
    try:
        return _encoded(value)
    except _Problem as problem:
        raise error(problem.message(root)) from None


def _encoded(value: Any) -> Any:
    # Exact types first, in order of how common they are: this is every
    # enqueue's hot path, and plain JSON must cost no more than a walk.
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is list:
        return _list(value)
    if kind is dict:
        return _dict(value)
    if kind is float:
        if math.isfinite(value):
            return value
        raise _Problem(f" is {value!r}, which JSON cannot carry.")
    tag = _TAGGERS.get(kind)
    if tag is not None:
        return tag(value)
    return _uncommon(value)


def _list(value: list[Any]) -> list[Any]:
    try:
        return [_encoded(item) for item in value]
    except _Problem as problem:
        problem.where.append(f"[{_first_failing(enumerate(value), _encoded)}]")
        raise


def _dict(value: dict[Any, Any]) -> dict[str, Any]:
    for key in value:
        if not isinstance(key, str):
            raise _Problem(
                f" has the key {key!r} ({type(key).__name__}); JSON object keys are "
                f'strings, so the task would receive "{key}" instead.'
            )
    try:
        out = {key: _encoded(item) for key, item in value.items()}
    except _Problem as problem:
        problem.where.append(f"[{_first_failing(value.items(), _encoded)!r}]")
        raise
    if len(out) == 1 and next(iter(out)).startswith("$"):
        return {ESCAPE: out}
    return out


def _first_failing(items: Iterable[tuple[Any, Any]], walk: Callable[[Any], Any]) -> Any:
    """The key of the first item ``walk`` rejects: only looked for once a walk failed."""
    for key, item in items:
        try:
            walk(item)
        except (_Problem, PayloadNotDecodableError):
            return key
    raise AssertionError("no item fails twice")  # pragma: no cover  # walks are pure


def _uncommon(value: Any) -> Any:
    """Subclasses of the plain types, and the refusals with a hint of what to pass."""
    if isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return _encoded(float(value))
    if isinstance(value, list):
        return _list(value)
    if isinstance(value, dict):
        return _dict(value)
    kind = type(value).__name__
    if isinstance(value, Model):
        name = value._meta.model_name
        raise _Problem(
            f" is a {kind} model instance; pass its primary key ({name}.pk) and fetch "
            "it in the task."
        )
    if isinstance(value, QuerySet):
        raise _Problem(
            f" is a QuerySet of {value.model.__name__}; pass a list of primary keys "
            "(list(queryset.values_list('pk', flat=True))) and fetch them in the task."
        )
    for base in _TAGGERS:
        if isinstance(value, base):
            raise _Problem(
                f" is a {kind}, a subclass of {base.__name__} that would come back as a "
                f"plain {base.__name__}; convert it to a {base.__name__} first."
            )
    hint = _HINTS.get(kind, "")
    raise _Problem(
        f" is a {kind}, which does not survive a JSON round trip{hint}; use JSON values "
        "(str, int, float, bool, None, list, dict) or UUID, datetime, date, time, Decimal."
    )


_HINTS = {
    "tuple": " (JSON has arrays but no tuples; pass a list)",
    "set": " (pass a list, e.g. sorted(the_set))",
    "frozenset": " (pass a list, e.g. sorted(the_set))",
    "bytes": " (decode it to str, or base64-encode it)",
    "bytearray": " (decode it to str, or base64-encode it)",
    "timedelta": " (pass its total_seconds())",
}


def _uuid(value: uuid.UUID) -> dict[str, str]:
    return {"$uuid": str(value)}


def _datetime(value: datetime) -> dict[str, str]:
    zone = value.tzinfo
    if zone is None or value.utcoffset() is None:
        raise _Problem(
            f" is a naive datetime ({value.isoformat()}); make it timezone-aware "
            "(django.utils.timezone.make_aware(value), or tzinfo=...) so that the task "
            "gets the same instant."
        )
    if isinstance(zone, ZoneInfo) and zone.key is not None:
        return {"$datetime": f"{value.isoformat()}[{zone.key}]"}
    _check_fixed(zone, "datetime")
    return {"$datetime": value.isoformat()}


def _date(value: date) -> dict[str, str]:
    return {"$date": value.isoformat()}


def _time(value: time) -> dict[str, str]:
    zone = value.tzinfo
    if zone is not None:
        if isinstance(zone, ZoneInfo):
            raise _Problem(
                f" is a time in the zone {zone.key}, whose offset depends on a date the "
                "time does not have; pass a datetime, or a naive time and the zone's name."
            )
        _check_fixed(zone, "time")
    return {"$time": value.isoformat()}


def _check_fixed(zone: tzinfo, what: str) -> None:
    """Accept an unnamed ``datetime.timezone``: its offset is all there is to keep."""
    if isinstance(zone, timezone):
        offset = zone.utcoffset(None)
        if offset.microseconds:
            # No zone has one, and fromisoformat reads +00:00:00.000001 as UTC.
            raise _Problem(
                f" is a {what} whose UTC offset ({offset}) has a fraction of a second, "
                "which does not come back exactly; round the offset to whole seconds."
            )
        if zone.tzname(None) == timezone(offset).tzname(None):
            return
    raise _Problem(
        f" is a {what} with the tzinfo {zone!r}, which would not come back as itself; "
        "use a zoneinfo.ZoneInfo or an unnamed datetime.timezone."
    )


def _decimal(value: Decimal) -> dict[str, str]:
    if value.is_nan():
        raise _Problem(
            f" is Decimal({str(value)!r}), which is not equal to itself (and a signalling "
            "NaN raises when compared); pass None or a string instead."
        )
    return {"$decimal": str(value)}


_TAGGERS: dict[type[Any], Callable[[Any], dict[str, str]]] = {
    uuid.UUID: _uuid,
    datetime: _datetime,
    date: _date,
    time: _time,
    Decimal: _decimal,
}


# -- decoding ---------------------------------------------------------------------


def from_json(value: Any, root: str) -> Any:
    """The Python value of a stored form; ``PayloadNotDecodableError`` names a bad tag."""
    try:
        return _decoded(value)
    except _Problem as problem:
        raise PayloadNotDecodableError(problem.message(root)) from None


def _decoded(value: Any) -> Any:
    kind = type(value)
    if kind is list:
        try:
            return [_decoded(item) for item in value]
        except _Problem as problem:
            problem.where.append(f"[{_first_failing(enumerate(value), _decoded)}]")
            raise
    if kind is dict:
        if len(value) == 1:
            key = next(iter(value))
            if key.startswith("$"):
                return _untagged(key, value[key])
        return _decoded_items(value)
    return value


def _decoded_items(value: dict[str, Any]) -> dict[str, Any]:
    try:
        return {key: _decoded(item) for key, item in value.items()}
    except _Problem as problem:
        problem.where.append(f"[{_first_failing(value.items(), _decoded)!r}]")
        raise


def _untagged(tag: str, payload: Any) -> Any:
    if tag == ESCAPE and type(payload) is dict:
        return _decoded_items(payload)
    parse = _PARSERS.get(tag)
    if parse is None:
        raise _Problem(
            f" is tagged {tag!r}, which this version of django-jobs does not know (was it "
            "enqueued by a newer one?); run a worker that knows it."
        )
    if type(payload) is not str:
        raise _Problem(f" is tagged {tag!r} but holds {payload!r}, not a string.")
    try:
        return parse(payload)
    except (ValueError, ArithmeticError, ZoneInfoNotFoundError) as exc:
        raise _Problem(f" is tagged {tag!r} but holds {payload!r}: {exc}") from None


def _parse_datetime(text: str) -> datetime:
    key = None
    if text.endswith("]"):
        text, _, key = text[:-1].partition("[")
    value = datetime.fromisoformat(text)
    offset = value.utcoffset()
    if offset is None:
        raise ValueError("a datetime is stored with its offset")
    if key is None:
        return value
    zone = ZoneInfo(key)
    wall = value.replace(tzinfo=None)
    # The offset tells the fold apart: which of a repeated hour, which side of a gap.
    for fold in (0, 1):
        candidate = wall.replace(tzinfo=zone, fold=fold)
        if candidate.utcoffset() == offset:
            return candidate
    return value.astimezone(zone)  # the zone's rules changed since: keep the instant


def _parse_decimal(text: str) -> Decimal:
    value = Decimal(text)
    if value.is_nan():
        raise ValueError("NaN is not stored")
    return value


_PARSERS: dict[str, Callable[[str], Any]] = {
    "$uuid": uuid.UUID,
    "$datetime": _parse_datetime,
    "$date": date.fromisoformat,
    "$time": time.fromisoformat,
    "$decimal": _parse_decimal,
}
