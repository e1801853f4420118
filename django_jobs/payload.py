"""What may go into a job row: values that come back equal and of the same type, under a bound.

Django's ``normalize_json`` would quietly turn a tuple into a list, and
``json.dumps`` would turn an integer dict key into a string; either way the task
would receive something its caller did not send. We refuse instead, naming
the exact place in the arguments. ``codec.py`` defines the stored form (plain
JSON, plus tagged UUID, datetime, date, time and Decimal); this module applies
it to a call's arguments and a task's return value, and bounds their size.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from .codec import to_json
from .exceptions import (
    ArgumentsNotJSONError,
    PayloadTooLargeError,
    ResultNotJSONError,
    ResultTooLargeError,
    StepResultNotJSONError,
    StepResultTooLargeError,
)


class Encoded(NamedTuple):
    """A call's arguments as the row stores them, and as the JSON text COPY sends."""

    args: list[Any]
    kwargs: dict[str, Any]
    args_json: str
    kwargs_json: str


def check_arguments(args: Sequence[Any], kwargs: dict[str, Any], max_bytes: int) -> Encoded:
    """Validate enqueue arguments; return their stored form, as values and as JSON text."""
    # A task without arguments is common enough to skip the walk and the encoder for.
    stored_args = to_json([*args], "args") if args else []
    stored_kwargs = to_json(kwargs, "kwargs") if kwargs else {}
    args_json = encode(stored_args) if args else "[]"
    kwargs_json = encode(stored_kwargs) if kwargs else "{}"
    if _NUL_ESCAPE in args_json or _NUL_ESCAPE in kwargs_json:
        _refuse_nul((list(args), "args"), (kwargs, "kwargs"), error=ArgumentsNotJSONError)
    size = len(args_json) + len(kwargs_json)  # ASCII (escaped) JSON: characters are bytes
    if size > max_bytes:
        raise PayloadTooLargeError(
            f"The arguments take {size} bytes as JSON, over MAX_PAYLOAD_BYTES ({max_bytes}); "
            "store large data elsewhere and pass its key."
        )
    return Encoded(stored_args, stored_kwargs, args_json, kwargs_json)


# One encoder: json.dumps with options builds a new JSONEncoder on every call.
encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def check_result(value: Any, max_bytes: int) -> Any:
    """A return value's stored form; refuse one we cannot store faithfully or in the bound."""
    return _bounded(value, max_bytes, "the return value", ResultNotJSONError, ResultTooLargeError)


def check_step_result(name: str, value: Any, max_bytes: int) -> Any:
    """A step's result in its stored form, under the same rules and bound as a return value."""
    return _bounded(
        value,
        max_bytes,
        f"the result of step {name!r}",
        StepResultNotJSONError,
        StepResultTooLargeError,
    )


def _bounded(
    value: Any,
    max_bytes: int,
    root: str,
    not_json: type[ResultNotJSONError],
    too_large: type[ResultTooLargeError],
) -> Any:
    stored = to_json(value, root, not_json)
    text = encode(stored)
    if _NUL_ESCAPE in text:
        _refuse_nul((value, root), error=not_json)
    size = len(text.encode())
    if size > max_bytes:
        raise too_large(
            f"{root[0].upper()}{root[1:]} takes {size} bytes as JSON, over MAX_RESULT_BYTES "
            f"({max_bytes}); store large results elsewhere and return their key."
        )
    return stored


# How the encoder writes a NUL character: what to look for before walking.
_NUL_ESCAPE = "\\u0000"


def _refuse_nul(*values: tuple[Any, str], error: type[Exception]) -> None:
    """Raise ``error`` naming the string that holds a NUL character, if one does.

    PostgreSQL's jsonb cannot hold one (nor can its text columns): a stored
    result with one failed its worker's every write after it, the other
    jobs' outcomes with it. SQLite could store it; it is refused there too,
    so that what works in development works in production. A ``\\u0000`` in
    the JSON text is only a candidate (it may be an escaped backslash and
    "u0000"); the walk decides.
    """
    for value, root in values:
        for where in _nul_places(value, root):
            raise error(
                f"{where} contains a NUL character (\\x00), which PostgreSQL cannot store; "
                "remove it, or pass the text base64-encoded."
            )


def _nul_places(value: Any, where: str) -> Iterator[str]:
    if isinstance(value, str):
        if "\x00" in value:
            yield where
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _nul_places(item, f"{where}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and "\x00" in key:
                yield f"{where} (its key {key!r})"
            yield from _nul_places(item, f"{where}[{key!r}]")
