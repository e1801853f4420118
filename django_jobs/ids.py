"""Job ids: UUIDs that grow with time (RFC 9562, version 7), not random ones.

Every index keyed by the job's id (the primary key, the attempt table's
``(job_id, number)``) takes a new job's entry at its right edge instead of on
a random page. A random id dirtied a random page of each such index per job:
once the index outgrew the buffer cache every insert read a page back, and
after each checkpoint every page touched was written to the WAL whole. A
20,000-job ``enqueue_many`` right after a checkpoint wrote 29 MB of WAL with
random ids and 12 MB with these (docs/benchmarks.md).

Layout: 48 bits of Unix time in milliseconds, the version, a 26-bit counter
split around the variant bits, then 48 random bits. The counter starts at a
random point for each batch, so the ids of one batch sort in the order they
were made and two batches of the same millisecond do not share a prefix. The
random tail keeps ids of different processes apart.
"""

from __future__ import annotations

import os
import time
import uuid

_COUNTER_BITS = 26  # 12 in the version's 16 bits, 14 in the variant's


def new_id() -> uuid.UUID:
    """One time-ordered id, for a job written on its own.

    The layout of ``new_ids`` with a counter that starts at a random point,
    built as one integer: formatting the text and parsing it back took twice
    as long (6.3 against 2.9 µs).
    """
    milliseconds = time.time_ns() // 1_000_000
    bits = int.from_bytes(os.urandom(10))  # 12 bits beside the version, 62 after the variant
    high, low = bits >> 62 & 0xFFF, bits & (1 << 62) - 1
    return uuid.UUID(int=milliseconds << 80 | 0x7 << 76 | high << 64 | 0b10 << 62 | low)


def new_ids(count: int) -> list[str]:
    """``count`` time-ordered ids as text, ascending, from one read of the OS's random source.

    Text, because the COPY line and the result both take it. The time and the
    counter's high bits change once per 16,384 ids, so each id formats only
    its counter's low bits and slices its random tail from one hex string: no
    UUID objects, about the cost of the random ids this replaced.
    """
    milliseconds = time.time_ns() // 1_000_000
    tails = os.urandom(4 + 6 * count).hex()
    counter = int(tails[:8], 16) >> (32 - _COUNTER_BITS + 1)  # room to count up
    ids: list[str] = []
    offset = 8 - 12 * counter  # where the tail of the id numbered ``at`` starts
    first = counter
    while len(ids) < count:
        high = first >> 14  # time carry and the 12 bits beside the version
        stop = min((high + 1) << 14, counter + count)
        time_hex = f"{milliseconds + (high >> 12):012x}"
        head = f"{time_hex[:8]}-{time_hex[8:]}-7{high & 0xFFF:03x}-"
        ids += [
            f"{head}{0x8000 | at & 0x3FFF:04x}-{tails[12 * at + offset : 12 * at + offset + 12]}"
            for at in range(first, stop)
        ]
        first = stop
    return ids
