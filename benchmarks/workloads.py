"""The five workloads, the same for every peer, written against :class:`Peer` only."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from benchmarks import pg, record
from benchmarks.cost import CostMeter, machine_ticks
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
    # W6: offer ``overload_factor`` x the drain capacity (the median of
    # ``overload_capacity_runs`` drains) for ``overload_warmup`` + ``overload_seconds``,
    # in bulk batches of ``overload_batch``, read every ``overload_window`` seconds;
    # the windows of the warm-up (the workers still starting) are reported, not judged.
    overload_seconds: float = 300.0
    overload_warmup: float = 10.0
    overload_capacity_runs: int = 3
    overload_window: float = 10.0
    overload_factor: float = 2.0
    overload_batch: int = 128
    # W7: ``pressure_rate`` jobs/s offered in batches of ``pressure_batch``
    # through three phases (clean, horizon pinned, recovery) of these lengths,
    # a pickup probe every ``pressure_probe_gap`` seconds; ``pressure_pin``:
    # "idle" (one transaction idle after taking an xid) or "readers" (four
    # REPEATABLE READ transactions scanning the peer's tables). The recovery
    # is reported in two parts: its first ``pressure_settle`` seconds and the
    # rest, which issue 17 wants back at the clean figures.
    pressure_rate: float = 1000.0
    pressure_batch: int = 50
    pressure_phases: tuple[float, float, float] = (60.0, 120.0, 60.0)
    pressure_settle: float = 30.0
    pressure_probe_gap: float = 0.25
    pressure_pin: str = "idle"


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
    overload_warmup=1.0,
    overload_capacity_runs=1,
    overload_window=1.0,
    overload_batch=16,
    pressure_rate=100.0,
    pressure_batch=10,
    pressure_phases=(1.0, 2.0, 1.0),
    pressure_settle=0.5,
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
        with PeakSampler(workers.pids) as sampler, CostMeter(peer.db, workers.pids) as meter:
            last = peer.wait_drained(workers, sizes.drain_timeout)
            sampler.sample()
            cost = meter.result(jobs)
    finally:
        workers.stop()
    return {"jobs_s": jobs / (last - started), "peak_rss_mb": sampler.peak_mb, **cost}


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
            committed[number] = peer.enqueue_probe(number)
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

    The capacity is W2's drain rate (best setting) on a clean table, the
    median of ``overload_capacity_runs`` drains: one drain lasts about three
    seconds here and moved by a fifth between runs, and every window is
    judged against it. W2 counts the workers' start-up, the windows do
    not, so each window is also judged against the steady drain rate
    (``steady_drain``), which is the stricter yardstick. Then the same
    workers run while a producer offers ``overload_factor`` x W2's rate in
    bulk batches on a wall-clock schedule (no drift), and every window
    records the completions (jobs enqueued minus jobs pending, differenced),
    the backlog, the dead tuples of the peer's tables, the cores the producer
    used and how busy the machine was (the producer and its server backend
    share the workers' cores). The
    windows of the first ``overload_warmup`` seconds, while the workers
    start, are kept but not judged: a start-up is what W2 measures, not what
    a growing backlog does. A queue that keeps its promise completes about
    its capacity in every judged window; one whose claim slows down with dead
    tuples does not.
    """
    best = peer.settings()["best"]
    capacities = []
    for _ in range(sizes.overload_capacity_runs):
        peer.reset()
        capacities.append(drain(peer, best, sizes.drain, sizes)["jobs_s"])
    capacity = statistics.median(capacities)
    steady = [
        steady_drain(peer, best, capacity, sizes) for _ in range(sizes.overload_capacity_runs)
    ]
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
        producer_before, ticks_before = time.process_time(), machine_ticks()
        ends = started + sizes.overload_warmup + sizes.overload_seconds
        while (now := time.monotonic()) < ends:
            if now >= next_batch:
                if not peer.enqueue_bulk(sizes.overload_batch):
                    peer.enqueue_one(sizes.overload_batch)
                enqueued += sizes.overload_batch
                next_batch += gap
            if now >= next_window:
                backlog = peer.pending()
                done = enqueued - backlog
                producer, ticks = time.process_time(), machine_ticks()
                windows.append(
                    {
                        "t_s": round(now - started, 1),
                        "warmup": window_start < started + sizes.overload_warmup,
                        "completed_s": (done - done_before) / (now - window_start),
                        "backlog": backlog,
                        "dead_tuples": peer.dead_tuples(),
                        # Cores the producer (this process) used, and the
                        # share of the machine in use: the offer is not free.
                        "producer_cores": (producer - producer_before) / (now - window_start),
                        "machine_busy": (ticks[0] - ticks_before[0])
                        / max(1, ticks[1] - ticks_before[1]),
                    }
                )
                done_before, window_start = done, now
                producer_before, ticks_before = producer, ticks
                next_window += sizes.overload_window
            if workers.all_exited():
                raise RuntimeError(f"{peer.name}: workers exited\n{workers.output()}")
            time.sleep(max(0.0, min(next_batch, next_window) - time.monotonic()))
    finally:
        workers.stop()
    peer.reset()
    steady_capacity = statistics.median(steady)
    verdict = judge_windows(windows, capacity)
    return {
        "capacity_jobs_s": capacity,
        "capacity_runs_jobs_s": capacities,
        "steady_capacity_jobs_s": steady_capacity,
        "steady_runs_jobs_s": steady,
        "offered_jobs_s": offered,
        "windows": windows,
        **verdict,
        "steady_min_ratio": verdict["min_completed_s"] / steady_capacity,
        "steady_median_ratio": verdict["median_completed_s"] / steady_capacity,
        "final_backlog": windows[-1]["backlog"],
    }


def steady_drain(peer: Peer, setting: WorkerSetting, capacity: float, sizes: Sizes) -> float:
    """The drain rate once the workers run, with nothing offered: W6's second yardstick.

    W2's rate counts from the workers' launch, so their start-up (half a
    second of a three-second drain here) is in it, while W6's judged windows
    come after the warm-up. This one counts the completions of one window
    after the same warm-up, on a backlog that outlasts both: twice what the
    capacity would drain in that time, eight times more if that ran out. If
    nothing completed in the window, the workers were still starting (a
    loaded machine, a smoke run's one-second warm-up): tried again with twice
    the warm-up. The backlog left is the caller's to empty.
    """
    jobs = max(sizes.drain, int(2 * capacity * (sizes.overload_warmup + sizes.overload_window)))
    warmup = sizes.overload_warmup
    for _ in range(3):
        peer.reset()
        peer.fill(jobs)
        peer.analyze()
        workers = peer.start_workers(setting, drain=False)
        try:
            time.sleep(warmup)
            before, started = peer.pending(), time.monotonic()
            time.sleep(sizes.overload_window)
            after, ended = peer.pending(), time.monotonic()
            if workers.all_exited():
                raise RuntimeError(f"{peer.name}: workers exited\n{workers.output()}")
        finally:
            workers.stop()
        if not after:
            jobs *= 8
        elif after < before:
            return (before - after) / (ended - started)
        else:
            warmup *= 2
    raise RuntimeError(
        f"{peer.name}: no steady rate in three tries (the backlog ran out, or nothing "
        f"completed within {warmup / 2:g} s of warm-up and a window)"
    )


def judge_windows(windows: list[dict[str, Any]], capacity: float) -> dict[str, float]:
    """W6's verdict: the median and the lowest completions of the windows after the warm-up."""
    rates = [w["completed_s"] for w in windows if not w["warmup"]]
    return {
        "median_completed_s": statistics.median(rates),
        "min_completed_s": min(rates),
        "min_ratio": min(rates) / capacity,
    }


def pressure_phases(sizes: Sizes) -> list[tuple[str, float]]:
    """W7's phases as reported, with their seconds.

    The recovery is split into its first ``pressure_settle`` seconds
    ("recovering") and the rest ("recovered"; none if the recovery is no
    longer), so the rest can be held against the clean phase.
    """
    clean, pinned, recovery = sizes.pressure_phases
    settle = min(sizes.pressure_settle, recovery)
    phases = [("clean", clean), ("pinned", pinned), ("recovering", settle)]
    return [*phases, ("recovered", recovery - settle)] if recovery > settle else phases


def w7_pressure(peer: Peer, sizes: Sizes) -> dict[str, Any]:
    """A steady load while something pins the vacuum horizon: is the rate kept, the pickup fast?

    The best setting runs while a producer offers ``pressure_rate`` jobs/s in
    small bulk batches on a wall-clock schedule, through three phases: clean;
    the horizon pinned (``Pin``), so no dead row of any table can be removed;
    and recovery, after the pin is released, reported as its first
    ``pressure_settle`` seconds and the rest (``pressure_phases``). A pickup
    probe is enqueued every ``pressure_probe_gap`` seconds (commit → the
    task's first line). Per phase: the completions against the offer, the
    probes' p50/p99, and the dead tuples of each of the peer's tables at its
    end.
    """
    peer.reset()
    peer.analyze()
    target = peer.record_target()
    record.clear(target)
    workers = peer.start_workers(peer.settings()["best"], drain=False)
    committed: dict[int, tuple[str, float]] = {}
    marks: list[dict[str, Any]] = []
    enqueued = probes = 0
    gap = sizes.pressure_batch / sizes.pressure_rate
    pin = Pin(peer, sizes.pressure_pin)
    try:
        peer.enqueue_probe(0)  # warm: the workers are up once probe 0 ran
        _wait_for(target, {0}, workers, 120)
        started = time.monotonic()
        next_batch = next_probe = started
        for phase, seconds in pressure_phases(sizes):
            if phase == "pinned":
                pin.start()
            elif phase == "recovering":
                pin.stop()
            marks.append(
                {
                    "phase": phase,
                    "at": time.monotonic(),
                    "enqueued": enqueued,
                    "pending": peer.pending(),
                }
            )
            ends = time.monotonic() + seconds
            while (now := time.monotonic()) < ends:
                if now >= next_batch:
                    if not peer.enqueue_bulk(sizes.pressure_batch):
                        peer.enqueue_one(sizes.pressure_batch)
                    enqueued += sizes.pressure_batch
                    next_batch += gap
                if now >= next_probe:
                    probes += 1
                    committed[probes] = (phase, peer.enqueue_probe(probes))
                    enqueued += 1
                    next_probe += sizes.pressure_probe_gap
                if workers.all_exited():
                    raise RuntimeError(f"{peer.name}: workers exited\n{workers.output()}")
                time.sleep(max(0.0, min(next_batch, next_probe, ends) - time.monotonic()))
            marks[-1].update(
                end=time.monotonic(),
                enqueued_end=enqueued,
                pending_end=peer.pending(),
                dead_tuples=peer.dead_tuples(),
            )
        starts = _wait_for_some(target, set(committed), workers, 60)
    finally:
        pin.stop()
        workers.stop()
    peer.reset()
    result: dict[str, Any] = {"offered_jobs_s": sizes.pressure_rate, "pin": sizes.pressure_pin}
    for mark in marks:
        seconds = mark["end"] - mark["at"]
        offered = (mark["enqueued_end"] - mark["enqueued"]) / seconds
        done = (mark["enqueued_end"] - mark["pending_end"]) - (mark["enqueued"] - mark["pending"])
        waits = sorted(
            (starts[n] - at) * 1000
            for n, (phase, at) in committed.items()
            if phase == mark["phase"] and n in starts
        )
        missing = sum(
            1 for n, (p, _) in committed.items() if p == mark["phase"] and n not in starts
        )
        result[mark["phase"]] = {
            "completed_s": done / seconds,
            "kept": done / seconds / offered,
            "pickup_p50_ms": statistics.median(waits) if waits else None,
            "pickup_p99_ms": _percentile(waits, 99) if waits else None,
            "probes_not_started": missing,
            "backlog_end": mark["pending_end"],
            "dead_tuples_end": mark["dead_tuples"],
        }
    return result


class Pin:
    """What holds the vacuum horizon back during the pinned phase.

    ``idle``: one connection that took a transaction id and then sits idle in
    its transaction (a forgotten ``BEGIN`` in a shell, a stuck request).
    ``readers``: four ``REPEATABLE READ`` transactions that keep scanning the
    peer's tables (a long report, a logical backup).
    """

    def __init__(self, peer: Peer, kind: str) -> None:
        if kind not in ("idle", "readers"):
            raise ValueError(f"pressure pin {kind!r}: use idle or readers")
        self.peer, self.kind = peer, kind
        self.connections: list[Any] = []
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        if self.kind == "idle":
            conn = psycopg.connect(pg.dsn(self.peer.db))  # not autocommit: BEGIN implied
            conn.execute("SELECT txid_current()")  # an open transaction with an xid
            self.connections.append(conn)
            return
        for _ in range(4):
            thread = threading.Thread(target=self._read, daemon=True)
            thread.start()
            self.threads.append(thread)

    def _read(self) -> None:
        conn = psycopg.connect(pg.dsn(self.peer.db))
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        self.connections.append(conn)  # one snapshot, held from the first scan to stop()
        while not self.stopping.is_set():
            for table in self.peer.job_tables:
                conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()
            self.stopping.wait(0.5)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(10)
        for conn in self.connections:
            with contextlib.suppress(Exception):
                conn.rollback()
                conn.close()
        self.connections, self.threads = [], []


def _wait_for_some(target: str, wanted: set[int], workers: Any, timeout: float) -> dict[int, float]:
    """The probes' start times, waiting up to ``timeout`` for the last ones."""
    deadline = time.monotonic() + timeout
    while True:
        starts = record.read_starts(target)
        if wanted <= starts.keys() or time.monotonic() > deadline or workers.all_exited():
            return starts
        time.sleep(0.1)


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
    "w7": w7_pressure,
}
