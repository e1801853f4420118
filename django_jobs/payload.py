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
from .text import unstorable


class Encoded(NamedTuple):
    """A call's arguments as the row stores them, and as the JSON text COPY sends."""

    args: list[Any]
    kwargs: dict[str, Any]
    args_json: str
    kwargs_json: str


def check_arguments(args: Sequence[Any], kwargs: dict[str, Any], max_bytes: int) -> Encoded:
    """Validate enqueue arguments; return their stored form, as values and as JSON text."""
    # A task without arguments is common enough to skip the walk and the encoder for.
    try:
        stored_args = to_json([*args], "args") if args else []
        stored_kwargs = to_json(kwargs, "kwargs") if kwargs else {}
        args_json = encode(stored_args) if args else "[]"
        kwargs_json = encode(stored_kwargs) if kwargs else "{}"
    except RecursionError:
        # The walk and the encoder recurse once per level: arguments nested a
        # few hundred deep ended the enqueue with a bare RecursionError.
        raise ArgumentsNotJSONError(
            "The arguments are nested too deep to store (lists or dicts within each other "
            "hundreds of levels down); pass them flatter."
        ) from None
    if _candidate(args_json) or _candidate(kwargs_json):
        _refuse_unstorable((args, "args"), (kwargs, "kwargs"), error=ArgumentsNotJSONError)
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
    if _candidate(text):
        _refuse_unstorable((value, root), error=not_json)
    size = len(text.encode())
    if size > max_bytes:
        raise too_large(
            f"{root[0].upper()}{root[1:]} takes {size} bytes as JSON, over MAX_RESULT_BYTES "
            f"({max_bytes}); store large results elsewhere and return their key."
        )
    return stored


# How the encoder writes a NUL character and the start of a surrogate (a lone
# one, or half of a pair for a character beyond the BMP): what makes a walk worth it.
_NUL_ESCAPE = "\\u0000"
_SURROGATE_ESCAPE = "\\ud"


def _candidate(text: str) -> bool:
    return _NUL_ESCAPE in text or _SURROGATE_ESCAPE in text


def _refuse_unstorable(*values: tuple[Any, str], error: type[Exception]) -> None:
    """Raise ``error`` naming the first string PostgreSQL cannot store, if one is (``text.py``).

    The JSON text only says where to look: ``\\u0000`` may be an escaped
    backslash and "u0000", ``\\ud83d`` half of an emoji's pair; the walk decides.
    """
    for value, root in values:
        for where, wrong in _unstorable(value, root):
            raise error(
                f"{where} contains {wrong}, which PostgreSQL cannot store; remove it, or pass "
                "the text base64-encoded."
            )


def _unstorable(value: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        if (wrong := unstorable(value)) is not None:
            yield where, wrong
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _unstorable(item, f"{where}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and (wrong := unstorable(key)) is not None:
                yield f"{where} (its key {key!r})", wrong
            yield from _unstorable(item, f"{where}[{key!r}]")
