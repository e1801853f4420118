"""What a unique enqueue costs against a plain one, per call, outside a transaction.

A plain enqueue in autocommit is one statement (the INSERT with its NOTIFY).
A unique enqueue is a transaction of its own: the key's advisory lock, the
look for the key's job, then the INSERT (a new key), nothing (a live job of
the key) or the UPDATE and its audit row (a debounce). Each case is timed
call by call, alternating with the others so a noisy neighbour spreads over
all of them; the figures are medians and 95th percentiles, in microseconds.

    .venv/bin/python -m benchmarks.unique_cost --calls 2000
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import timedelta

from benchmarks.drain import no_jobs


def cases() -> dict[str, Callable[[int], object]]:
    from benchmarks.benchapp.tasks import noop

    window = timedelta(hours=1)
    return {
        "plain": lambda n: noop.enqueue(),
        "idempotency key, new": lambda n: noop.using(idempotency_key=f"i{n}").enqueue(),
        "unique key, new": lambda n: noop.using(unique_key=f"u{n}").enqueue(),
        "unique key, live job": lambda n: noop.using(unique_key="live").enqueue(),
        "unique key + window, live job": lambda n: noop.using(
            unique_key="live", unique_for=window
        ).enqueue(),
        "debounce, job not started": lambda n: noop.using(
            unique_key="debounced", debounce=window
        ).enqueue(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per case")
    options = parser.parse_args()
    no_jobs()
    timed = cases()
    for call in timed.values():  # warm up: statements compiled, the live keys' jobs written
        for n in range(-50, 0):
            call(n)
    times: dict[str, list[float]] = {name: [] for name in timed}
    for n in range(options.calls):
        for name, call in timed.items():
            start = time.perf_counter()
            call(n)
            times[name].append((time.perf_counter() - start) * 1e6)
    plain = statistics.median(times["plain"])
    print("| enqueue | p50 µs | p95 µs | p50 against plain |")
    print("| --- | ---: | ---: | ---: |")
    for name, got in times.items():
        p50, p95 = statistics.median(got), statistics.quantiles(got, n=20)[-1]
        print(f"| {name} | {p50:.0f} | {p95:.0f} | {p50 / plain:.2f} |")


if __name__ == "__main__":
    main()
