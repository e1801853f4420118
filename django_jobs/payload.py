"""What may go into a job row: JSON that comes back equal, under a size bound.

Django's ``normalize_json`` would quietly turn a tuple into a list, and
``json.dumps`` would turn an integer dict key into a string; either way the task
would receive something its caller did not send. We refuse instead, naming
the exact place in the arguments.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from .exceptions import (
    ArgumentsNotJSONError,
    PayloadTooLargeError,
    ResultNotJSONError,
    ResultTooLargeError,
)


def check_round_trip(value: Any, path: str, error: type[Exception] = ArgumentsNotJSONError) -> None:
    """Raise ``error`` unless ``value`` survives a JSON round trip."""
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise error(f"{path} is {value!r}, which JSON cannot carry.")
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            check_round_trip(item, f"{path}[{index}]", error)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise error(
                    f"{path} has the key {key!r} ({type(key).__name__}); JSON object keys "
                    f"are strings, so the task would receive {json.dumps(str(key))} instead."
                )
            check_round_trip(item, f"{path}[{key!r}]", error)
        return
    kind = type(value).__name__
    hint = " (JSON has arrays but no tuples; pass a list)" if isinstance(value, tuple) else ""
    raise error(
        f"{path} is a {kind}, which does not survive a JSON round trip{hint}; "
        "use plain JSON values (str, int, float, bool, None, list, dict)."
    )


def check_arguments(args: Sequence[Any], kwargs: dict[str, Any], max_bytes: int) -> tuple[str, str]:
    """Validate enqueue arguments; return them as JSON text, which enqueue_many's COPY sends."""
    for index, arg in enumerate(args):
        check_round_trip(arg, f"args[{index}]")
    for name, arg in kwargs.items():
        check_round_trip(arg, f"kwargs[{name!r}]")
    # A task without arguments is common enough to skip the encoder for.
    args_json = encode([*args]) if args else "[]"
    kwargs_json = encode(kwargs) if kwargs else "{}"
    size = len(args_json) + len(kwargs_json)  # ASCII (escaped) JSON: characters are bytes
    if size > max_bytes:
        raise PayloadTooLargeError(
            f"The arguments take {size} bytes as JSON, over MAX_PAYLOAD_BYTES ({max_bytes}); "
            "store large data elsewhere and pass its key."
        )
    return args_json, kwargs_json


# One encoder: json.dumps with options builds a new JSONEncoder on every call.
encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def check_result(value: Any, max_bytes: int) -> None:
    """Refuse a return value we could not store faithfully or within the bound."""
    check_round_trip(value, "the return value", ResultNotJSONError)
    size = len(encode(value).encode())
    if size > max_bytes:
        raise ResultTooLargeError(
            f"The return value takes {size} bytes as JSON, over MAX_RESULT_BYTES "
            f"({max_bytes}); store large results elsewhere and return their key."
        )
