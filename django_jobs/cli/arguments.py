"""Argument types shared by the management commands.

They raise ArgumentTypeError, not CommandError: argparse turns it into
"argument --limit: ..." with the usage line, from the shell and from call_command.
"""

from __future__ import annotations

import math
from argparse import ArgumentTypeError


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ArgumentTypeError(f"{value!r} is not a whole number.") from None
    if number < 1:
        raise ArgumentTypeError(f"{value} must be at least 1.")
    return number


def non_negative_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ArgumentTypeError(f"{value!r} is not a whole number.") from None
    if number < 0:
        raise ArgumentTypeError(f"{value} must not be negative.")
    return number


def finite_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ArgumentTypeError(f"{value!r} is not a number.") from None
    if not math.isfinite(number):
        raise ArgumentTypeError(f"{value} is not a finite number.")
    return number


def positive_float(value: str) -> float:
    number = finite_float(value)
    if number <= 0:
        raise ArgumentTypeError(f"{value} must be more than zero.")
    return number


def non_negative_float(value: str) -> float:
    number = finite_float(value)
    if number < 0:
        raise ArgumentTypeError(f"{value} must not be negative.")
    return number
