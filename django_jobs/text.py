"""What PostgreSQL's text and jsonb can hold: no NUL character, no lone surrogate.

A Python ``str`` can hold both: ``"\\x00"``, and half of a UTF-16 pair
(``"\\ud800"``, as a ``surrogateescape`` decode or a careless slice leaves).
PostgreSQL refuses the first in any text and cannot encode the second in
UTF-8. From a worker, either made the write of its whole batch of outcomes
fail, every cycle, or ended the process; so what is given to us is refused
where it is given, and what a worker writes of its own (an error message, a
traceback) is escaped. SQLite would take both; they are refused there too,
so that what works in development works in production.
"""

from __future__ import annotations


def unstorable(text: str) -> str | None:
    """What keeps ``text`` out of PostgreSQL, said for a message; None if nothing does."""
    if "\x00" in text:
        return "a NUL character (\\x00)"
    if text.isascii():
        return None
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        return f"a lone surrogate ({text[exc.start]!r})"
    return None


def storable(text: str) -> str:
    """``text`` with each NUL and lone surrogate written as its escape: ``\\x00``, ``\\ud800``."""
    if unstorable(text) is None:
        return text
    text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode()


def clipped(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, its last one an ellipsis when cut.

    For what a worker writes of its own into a column of bounded length: a
    longer value failed the write of the worker's whole batch of outcomes.
    """
    return text if len(text) <= limit else text[: limit - 1] + "…"


def middle_clipped(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters by dropping its middle, saying how much.

    For a traceback: its beginning names where the work started, its end the
    innermost frames and the exception.
    """
    if len(text) <= limit:
        return text

    def marker(count: int) -> str:
        return f"\n[… {count:,} characters cut …]\n"

    keep = limit - len(marker(len(text)))  # the longest the count can be
    head, tail = keep - keep // 2, keep // 2
    return text[:head] + marker(len(text) - keep) + text[len(text) - tail :]
