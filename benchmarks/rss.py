"""W5: the peak resident memory of the largest single process in a worker tree.

Read from ``/proc/<pid>/status`` (``VmHWM``, the kernel's own high-water
mark), sampled in a thread while the workers run, so no extra package is
needed and the peak between samples is not missed.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                found += [int(c) for c in (task / "children").read_text().split()]
    return found


def tree(pid: int) -> list[int]:
    pids = [pid]
    index = 0
    while index < len(pids):
        pids += _children(pids[index])
        index += 1
    return pids


def peak_kb(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


class PeakSampler:
    """Follows the process trees of ``roots`` until stopped; ``peak_mb`` is the largest."""

    def __init__(self, roots: list[int], interval: float = 0.1) -> None:
        self.roots = roots
        self.interval = interval
        self.peak: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        for root in self.roots:
            for pid in tree(root):
                kb = peak_kb(pid)
                if kb > self.peak.get(pid, 0):
                    self.peak[pid] = kb

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    @property
    def peak_mb(self) -> float:
        return round(max(self.peak.values(), default=0) / 1024, 1)
