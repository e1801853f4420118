"""The live side of one running attempt, shared by its task thread and the worker.

The task reads cancellation and reports progress through its context; the
worker's lifeline (its heartbeat) writes progress (so a chatty task costs one
write per heartbeat, not one per call) and sets the cancel flag when the job
turns ``cancelling``; the watchdog stops the thread, or kills an isolated
attempt's child, when its time is up.
"""

from __future__ import annotations

import ctypes
import threading
import time
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING

from .exceptions import JobCancelled, JobStopped
from .text import unstorable
from .values import Progress

# A progress count is stored as a bigint: larger, its every write failed.
_LARGEST = 2**63 - 1

if TYPE_CHECKING:
    from .results import JobResult


class AttemptControl:
    """One attempt from its claim: it may wait for a job thread (``worker/prefetch.py``).

    Its timeout counts from ``start``, when a job thread takes it, not from
    the claim: waiting for a thread is not the task's time. Until then
    ``started`` is the claim's moment. ``start`` and ``give_back`` decide, under
    one lock, whether a waiting attempt runs or goes back to its queue: never both.
    """

    def __init__(self, timeout: float | None) -> None:
        self.claimed = self.started = time.monotonic()
        self.timeout = timeout
        self.deadline: float | None = None
        self.running = False  # a job thread took it (``start``)
        self.given_back = False  # it went back to its queue unstarted (``give_back``)
        # A flag, not a threading.Event: nothing waits on it, and an Event is a
        # Condition, a lock and a deque made for every job.
        self.cancelled = False
        self.cancel_seen: float | None = None  # when the worker learned of the cancel
        self.stop_sent: float | None = None  # when a stop exception was raised into the thread
        self.stop_kind: type[JobStopped] | None = None
        self.thread_id: int | None = None
        self.child: BaseProcess | None = None  # an isolated attempt's process
        self.result: JobResult | None = None  # what task_started was sent with
        self.finished = False  # the task returned or raised; nothing may be raised into it
        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self._dirty = False

    # -- from the task thread ------------------------------------------------

    def start(self) -> bool:
        """A job thread takes the attempt: its clock starts; False if it was given back."""
        with self._lock:
            if self.given_back:
                return False
            self.running = True
            self.started = time.monotonic()
            if self.timeout is not None:
                self.deadline = self.started + self.timeout
            return True

    def begin(self) -> None:
        with self._lock:
            self.thread_id = threading.get_ident()

    def end(self) -> None:
        with self._lock:
            self.finished = True

    def set_progress(self, done: int, total: int | None, message: str) -> None:
        if isinstance(done, bool) or not isinstance(done, int) or not 0 <= done <= _LARGEST:
            raise ValueError(f"progress done must be a whole number >= 0, not {done!r}.")
        if total is not None and (
            isinstance(total, bool) or not isinstance(total, int) or total > _LARGEST
        ):
            raise ValueError(f"progress total must be a whole number or None, not {total!r}.")
        if total is not None and total < done:
            raise ValueError(f"progress done ({done}) may not exceed total ({total}).")
        if not isinstance(message, str):
            raise ValueError("progress message must be a string.")
        if (wrong := unstorable(message)) is not None:
            raise ValueError(f"progress message must not contain {wrong}.")
        with self._lock:
            if self._progress is not None and done < self._progress.done:
                raise ValueError(
                    f"progress may not go backwards within an attempt: {done} after "
                    f"{self._progress.done}."
                )
            self._progress = Progress(done, total, message[:500])
            self._dirty = True

    def raise_if_cancelled(self) -> None:
        if self.cancelled:
            raise JobCancelled("the job was cancelled; stopped cooperatively")

    # -- from the worker -------------------------------------------------------

    def take_progress(self) -> Progress | None:
        """The progress not yet written, if any; it counts as written from now on."""
        with self._lock:
            if not self._dirty:
                return None
            self._dirty = False
            return self._progress

    def give_back(self) -> bool:
        """Keep a waiting attempt from starting; False if a job thread took it already."""
        with self._lock:
            if self.running:
                return False
            self.given_back = True
            return True

    def request_cancel(self) -> None:
        if not self.cancelled:
            self.cancel_seen = time.monotonic()
            self.cancelled = True

    def adopt_child(self, process: BaseProcess) -> None:
        with self._lock:
            self.child = process

    def stop(self, kind: type[JobStopped]) -> bool:
        """Raise ``kind`` inside the task's thread; False if it already finished.

        CPython delivers it at the thread's next bytecode: a busy loop stops at
        once, a blocking C call (sleep, a socket read) only when it returns —
        which is why the worker gives up on the thread after STOP_GRACE_SECONDS.
        """
        with self._lock:
            thread_id, child = self.thread_id, self.child
            if self.finished or self.stop_sent is not None or (thread_id is None and child is None):
                return False  # over, already told, or not started
            self.stop_sent = time.monotonic()
            self.stop_kind = kind
            if child is not None:
                # An isolated attempt has a process of its own: end it for real.
                child.kill()
            elif thread_id is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(thread_id), ctypes.py_object(kind)
                )
            return True
