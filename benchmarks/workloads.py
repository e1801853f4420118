"""The five workloads, the same for every peer, written against :class:`Peer` only."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from benchmarks import record
from benchmarks.peers.base import Peer, WorkerSetting
from benchmarks.rss import PeakSampler


@dataclass(frozen=True)
class Sizes:
    one_by_one: int = 5_000
    bulk: int = 20_000
    drain: int = 20_000
    probes: int = 20
    probe_gap: float = 0.5
    backlog: int = 200_000
    drain_timeout: float = 900.0
    # W6: offer ``overload_factor`` x the drain capacity for ``overload_seconds``,
    # in bulk batches of ``overload_batch``, read every ``overload_window`` seconds.
    overload_seconds: float = 300.0
    overload_window: float = 10.0
    overload_factor: float = 2.0
    overload_batch: int = 128


QUICK = Sizes(
    one_by_one=500,
    bulk=2_000,
    drain=2_000,
    probes=10,
    probe_gap=0.3,
    backlog=20_000,
    overload_seconds=60.0,
)
SMOKE = Sizes(
    one_by_one=50,
    bulk=50,
    drain=50,
    probes=3,
    probe_gap=0.1,
    backlog=200,
    drain_timeout=60,
    overload_seconds=2.0,
    overload_window=1.0,
    overload_batch=16,
)


def w1_enqueue(peer: Peer, sizes: Sizes) -> dict[str, Any]:
    """Jobs/s enqueued one by one (own transaction each), and through the bulk path."""
    peer.reset()
    started = time.perf_counter()
    peer.enqueue_one(sizes.one_by_one)
    one = sizes.one_by_one / (time.perf_counter() - started)
    peer.reset()
    started = time.perf_counter()
    had_bulk = peer.enqueue_bulk(sizes.bulk)
    bulk = sizes.bulk / (time.perf_counter() - started) if had_bulk else None
    peer.reset()
    return {"one_by_one_jobs_s": one, "bulk_jobs_s": bulk}


def drain(peer: Peer, setting: WorkerSetting, jobs: int, sizes: Sizes) -> dict[str, Any]:
    """Workers started on ``jobs`` queued no-op jobs: jobs/s from start to the last done."""
    peer.fill(jobs)
    peer.analyze()
    started = time.time()
    workers = peer.start_workers(setting, drain=True)
    try:
        with PeakSampler(workers.pids) as sampler:
            last = peer.wait_drained(workers, sizes.drain_timeout)
            sampler.sample()
    finally:
        workers.stop()
    return {"jobs_s": jobs / (last - started), "peak_rss_mb": sampler.peak_mb}


def w2_drain(peer: Peer, sizes: Sizes) -> dict[str, Any]:
    """W2 for each setting; W5 is the peak RSS of the largest worker process meanwhile."""
    results = {}
    for name, setting in peer.settings().items():
        peer.reset()
        results[name] = drain(peer, setting, sizes.drain, sizes)
    peer.reset()
    return results


def w3_latency(peer: Peer, sizes: Sizes) -> dict[str, Any]:
    """An idle worker (defaults); single probes ``probe_gap`` apart; commit → task start."""
    peer.reset()
    target = peer.record_target()
    record.clear(target)
    workers = peer.start_workers(peer.settings()["defaults"], drain=False)
    committed: dict[int, float] = {}
    try:
        # Warm-up: the worker is up and idle once probe 0 has run.
        peer.enqueue_probe(0)
        _wait_for(target, {0}, workers, 120)
        time.sleep(sizes.probe_gap)
        for number in range(1, sizes.probes + 1):
            peer.enqueue_probe(number)
            committed[number] = time.time()
            time.sleep(sizes.probe_gap)
        starts = _wait_for(target, set(committed), workers, 60)
    finally:
        workers.stop()
    latencies = sorted((starts[n] - committed[n]) * 1000 for n in committed)
    peer.reset()
    return {
        "p50_ms": statistics.median(latencies),
        "p95_ms": _percentile(latencies, 95),
        "max_ms": latencies[-1],
    }


def w4_backlog(peer: Peer, sizes: Sizes) -> dict[str, Any] | None:
    """W2 (best setting) with ``backlog`` finished jobs already in the table."""
    if not peer.has_backlog_table:
        return None
    peer.reset()
    peer.add_finished(sizes.backlog)
    result = drain(peer, peer.settings()["best"], sizes.drain, sizes)
    peer.reset()
    return result


def w6_overload(peer: Peer, sizes: Sizes) -> dict[str, Any]:
    """Work arriving faster than it drains: does the drain rate hold while the backlog grows?

    The capacity is W2's drain rate (best setting) on a clean table. Then the
    same workers run while a producer offers ``overload_factor`` x that rate
    in bulk batches on a wall-clock schedule (no drift), and every window
    records the completions (jobs enqueued minus jobs pending, differenced),
    the backlog and the dead tuples of the peer's tables. A queue that keeps
    its promise completes about its capacity in every window; one whose claim
    slows down with dead tuples does not.
    """
    best = peer.settings()["best"]
    peer.reset()
    capacity = drain(peer, best, sizes.drain, sizes)["jobs_s"]
    peer.reset()
    peer.analyze()
    offered = sizes.overload_factor * capacity
    gap = sizes.overload_batch / offered
    windows: list[dict[str, Any]] = []
    enqueued = done_before = 0
    workers = peer.start_workers(best, drain=False)
    try:
        started = time.monotonic()
        next_batch, next_window, window_start = started, started + sizes.overload_window, started
        while (now := time.monotonic()) < started + sizes.overload_seconds:
            if now >= next_batch:
                if not peer.enqueue_bulk(sizes.overload_batch):
                    peer.enqueue_one(sizes.overload_batch)
                enqueued += sizes.overload_batch
                next_batch += gap
            if now >= next_window:
                backlog = peer.pending()
                done = enqueued - backlog
                windows.append(
                    {
                        "t_s": round(now - started, 1),
                        "completed_s": (done - done_before) / (now - window_start),
                        "backlog": backlog,
                        "dead_tuples": peer.dead_tuples(),
                    }
                )
                done_before, window_start = done, now
                next_window += sizes.overload_window
            if workers.all_exited():
                raise RuntimeError(f"{peer.name}: workers exited\n{workers.output()}")
            time.sleep(max(0.0, min(next_batch, next_window) - time.monotonic()))
    finally:
        workers.stop()
    peer.reset()
    rates = [w["completed_s"] for w in windows]
    return {
        "capacity_jobs_s": capacity,
        "offered_jobs_s": offered,
        "windows": windows,
        "median_completed_s": statistics.median(rates),
        "min_completed_s": min(rates),
        "min_ratio": min(rates) / capacity,
        "final_backlog": windows[-1]["backlog"],
    }


def _wait_for(target: str, wanted: set[int], workers: Any, timeout: float) -> dict[int, float]:
    deadline = time.monotonic() + timeout
    while True:
        starts = record.read_starts(target)
        if wanted <= starts.keys():
            return starts
        if time.monotonic() > deadline or workers.all_exited():
            missing = sorted(wanted - starts.keys())
            raise TimeoutError(f"probes {missing} never started\n{workers.output()}")
        time.sleep(0.05)


def _percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    rank = max(1, round(pct / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


ALL = {
    "w1": w1_enqueue,
    "w2": w2_drain,
    "w3": w3_latency,
    "w4": w4_backlog,
    "w6": w6_overload,
}
