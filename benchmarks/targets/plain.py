"""The two task bodies as plain functions, for peers that take a callable or a path."""

from __future__ import annotations

from benchmarks.record import record_start


def noop() -> None:
    """The job every benchmark runs: the cost measured is the queue's own."""


def probe(number: int) -> None:
    record_start(number)
