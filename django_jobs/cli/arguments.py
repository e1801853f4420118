"""Argument types shared by the management commands.

They raise ArgumentTypeError, not CommandError: argparse turns it into
"argument --limit: ..." with the usage line, from the shell and from call_command.
Each bounds its value to what the code behind it can use, so that a typo is
refused here, naming the option, rather than surfacing as an OverflowError
or a database error halfway through the command.
"""

from __future__ import annotations

import math
from argparse import ArgumentTypeError
from datetime import timedelta

from django_jobs.exceptions import MAX_ATTEMPTS_LIMIT, MAX_RETRY_DELAY_SECONDS
from django_jobs.text import unstorable

# The largest whole number an option takes: a PostgreSQL integer, as the attempt
# counter. Far above any sensible limit or batch size, and a LIMIT past a bigint
# failed in the database.
MAX_WHOLE_NUMBER = MAX_ATTEMPTS_LIMIT

# The longest duration an option takes, a hundred years, as the product bounds
# every delay: far longer, the timedelta or datetime built from it overflowed.
MAX_DAYS = MAX_RETRY_DELAY_SECONDS / 86400


def text(value: str) -> str:
    """``value``, refused if PostgreSQL text cannot hold it (a NUL, a lone surrogate).

    The type of every option given no other: a filter, an actor or a note that
    cannot be stored failed the query with a DataError or a UnicodeEncodeError.
    """
    if (wrong := unstorable(value)) is not None:
        # repr: the value itself may not be printable to the terminal.
        raise ArgumentTypeError(f"{value!r} is not valid text: it contains {wrong}.")
    return value


def _whole_number(value: str, minimum: int, below: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ArgumentTypeError(f"{value!r} is not a whole number.") from None
    if number < minimum:
        raise ArgumentTypeError(f"{value} {below}")
    if number > MAX_WHOLE_NUMBER:
        raise ArgumentTypeError(f"{value} must be at most {MAX_WHOLE_NUMBER}.")
    return number


def positive_int(value: str) -> int:
    return _whole_number(value, 1, "must be at least 1.")


def non_negative_int(value: str) -> int:
    return _whole_number(value, 0, "must not be negative.")


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


def _duration(value: str, unit: str, maximum: float, *, zero: bool) -> float:
    """A number of ``unit`` (a timedelta keyword) that makes a usable timedelta."""
    number = finite_float(value)
    if number < 0 or (number == 0 and not zero):
        bound = "not be negative" if zero else "be more than zero"
        raise ArgumentTypeError(f"{value} must {bound}.")
    if number > maximum:
        raise ArgumentTypeError(f"{value} must be at most {maximum:.0f} {unit} (a hundred years).")
    if number and not timedelta(**{unit: number}):
        # A timedelta keeps whole microseconds: less became zero, refused further on.
        raise ArgumentTypeError(f"{value} {unit} is shorter than a microsecond.")
    return number


def positive_seconds(value: str) -> float:
    return _duration(value, "seconds", MAX_RETRY_DELAY_SECONDS, zero=False)


def non_negative_seconds(value: str) -> float:
    return _duration(value, "seconds", MAX_RETRY_DELAY_SECONDS, zero=True)


def positive_days(value: str) -> float:
    return _duration(value, "days", MAX_DAYS, zero=False)
