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
from collections.abc import Sequence
from typing import Any, NamedTuple

from .codec import to_json
from .exceptions import (
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
    size = len(encode(stored).encode())
    if size > max_bytes:
        raise too_large(
            f"{root[0].upper()}{root[1:]} takes {size} bytes as JSON, over MAX_RESULT_BYTES "
            f"({max_bytes}); store large results elsewhere and return their key."
        )
    return stored
