"""``runworkers --health-port``: liveness and readiness over HTTP, for Kubernetes and friends.

A small standard-library HTTP server on a thread of the supervisor. Each path
is a named check that returns None when all is well or a one-line reason
when not:

* ``GET /livez``: 200 while every worker process's claim loop and heartbeat
  thread keep turning (``worker.pulse``), 503 with the reason otherwise. A
  process that exists but is stuck is not live.
* ``GET /readyz``: 200 when the database answers and at least one worker
  process is up, 503 otherwise (also while shutting down).

The body is one JSON object: ``{"ok": true|false, "reason": "..."}``. Anything
else is a 404. Requests are not logged (a probe every few seconds would fill
the log); the checks' failures are, by the supervisor.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

logger = logging.getLogger("django_jobs.supervisor")

Check = Callable[[], str | None]


class ProbeServer:
    """Serves ``checks`` (path -> check) on ``port`` of every interface, from a daemon thread."""

    def __init__(self, port: int, checks: Mapping[str, Check]) -> None:
        self.checks = dict(checks)
        probes = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                check = probes.checks.get(self.path.split("?", 1)[0])
                if check is None:
                    self._send(404, {"ok": False, "reason": f"no probe at {self.path}"})
                    return
                reason = check()
                self._send(
                    200 if reason is None else 503, {"ok": reason is None, "reason": reason or "ok"}
                )

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = (json.dumps(body) + "\n").encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                """Say nothing per request: the probe asks every few seconds."""

        # Raises OSError (port in use, no permission) here, before any worker starts.
        self.server = ThreadingHTTPServer(("", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        # Forked workers must not keep the port open after the supervisor is gone.
        os.register_at_fork(after_in_child=self.server.socket.close)

    def start(self) -> None:
        thread = threading.Thread(
            target=self.server.serve_forever, name="django-jobs-probes", daemon=True
        )
        thread.start()
        logger.info("Health probes on port %d: /livez and /readyz", self.port)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
