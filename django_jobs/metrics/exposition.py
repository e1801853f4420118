"""Serving the metrics: the supervisor's HTTP endpoint and the web process's registry.

Worker processes are forked by ``runworkers``; we use prometheus-client's
multiprocess mode: every process writes its counters to files in
``PROMETHEUS_MULTIPROC_DIR`` and the supervisor's endpoint adds them up at
scrape time. Per-process registries pulled by the supervisor were the other
choice; they lose a dead worker's counts (and so go backwards), where its
files stay and keep counting. ``--metrics-port`` sets the directory (a new
temporary one, removed at exit) unless the operator set it; an operator's
directory must be emptied before each start, as prometheus-client says.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

from .instruments import MULTIPROCESS_ENV, instruments, worker_instruments

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.registry import CollectorRegistry

    from ..backend import JobsBackend

MISSING = (
    "Metrics need prometheus-client: pip install 'django-jobs[metrics]' (or prometheus-client)."
)


def require_client() -> None:
    """Say what to install when the extra is missing, before anything else fails."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ImproperlyConfigured(MISSING) from None


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_address(text: str) -> Address:
    """``PORT`` (every interface) or ``HOST:PORT``; ValueError says what is wrong."""
    host, sep, port_text = text.rpartition(":")
    # A port alone listens on every interface: Prometheus scrapes from another host.
    host = host.strip("[]") if sep else "0.0.0.0"
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(
            f"{text!r}: the port must be a number from 1 to 65535, as PORT or HOST:PORT."
        )
    if not host:
        raise ValueError(f"{text!r}: the host before ':' is empty; give HOST:PORT or PORT alone.")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if host != "localhost":
            raise ValueError(
                f"{text!r}: {host!r} is not an IP address (or localhost) to listen on."
            ) from None
    return Address(host, int(port_text))


def use_multiprocess_dir() -> Callable[[], None]:
    """Make this process and the workers it forks count into one directory.

    Returns what to call at exit: removing the directory if we made it.
    Must run before the first metric is made in this process.
    """
    given = os.environ.get(MULTIPROCESS_ENV)
    if given:
        if not os.path.isdir(given) or not os.access(given, os.W_OK):
            raise ImproperlyConfigured(
                f"{MULTIPROCESS_ENV}={given!r} is not a writable directory; create it "
                "(empty) or unset it to let runworkers use a temporary one."
            )
        made = None
    else:
        made = tempfile.mkdtemp(prefix="django-jobs-metrics-")
        os.environ[MULTIPROCESS_ENV] = made
    worker_instruments.cache_clear()
    if instruments.cache_info().currsize:
        raise ImproperlyConfigured(
            "django-jobs metrics were recorded in this process before --metrics-port could "
            f"set {MULTIPROCESS_ENV}; set it in the environment before starting runworkers."
        )
    from prometheus_client import values

    # prometheus-client chooses a metric's storage when the metric is made,
    # from what it chose at import; an import earlier than ours (the project's
    # own metrics) chose memory. Ours are not made yet: choose again.
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]

    def remove() -> None:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)

    return remove


def worker_registry(backend: JobsBackend) -> CollectorRegistry:
    """Every process's counters, added up from the directory, and the database gauges."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    from .collector import JobsCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=os.environ[MULTIPROCESS_ENV])  # type: ignore[no-untyped-call]
    registry.register(
        JobsCollector(
            backend.db,
            backend.queues,
            backend.settings.WORKER_STALE_SECONDS,
            close_connection=True,
        )
    )
    return registry


class MetricsServer:
    """The supervisor's ``/metrics`` endpoint, on a thread of the supervisor process."""

    def __init__(self, address: Address, backend: JobsBackend) -> None:
        self.address = address
        self.backend = backend
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        from prometheus_client import start_http_server

        try:
            self._server, self._thread = start_http_server(
                self.address.port, addr=self.address.host, registry=worker_registry(self.backend)
            )
        except OSError as exc:
            raise ImproperlyConfigured(
                f"Cannot serve metrics on {self.address}: {exc.strerror or exc}."
            ) from None
        server = self._server
        # Forked workers inherit the listening socket; only the supervisor may
        # hold it, or the port would stay taken after it exits.
        os.register_at_fork(after_in_child=lambda: server.socket.close())

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
