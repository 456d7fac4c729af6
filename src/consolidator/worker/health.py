"""The worker's HTTP endpoints (off unless ``CONSOLIDATOR_WORKER_HTTP_PORT`` is set):

- ``/healthz``: 200 while the worker's loops are alive (the poll loop iterated, the flush loop
  ticked, recently); 503 otherwise: restart it;
- ``/readyz``: 200 while it does its work: partitions assigned (roles that ingest) and the
  database reachable (checked in the background, never inside a request); 503 otherwise;
- ``/metrics``: every metric in Prometheus' text format.

Each answer is small JSON (or the metrics text) and names what is wrong; it never holds a
setting's value.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from consolidator.rules.errors import ConsolidatorError
from consolidator.worker.metrics import CONTENT_TYPE

log = logging.getLogger(__name__)
PROBE_EVERY_S = 5.0  # the database check's period
PROBE_FRESH_S = 15.0  # a check older than this (one hung) counts as unreachable

Check = Callable[[], list[str]]  # the problems now; empty: fine


class DatabaseProbe:
    """Pings the database every :data:`PROBE_EVERY_S` in its own thread (its own connection), so a
    hung database never holds a probe request."""

    def __init__(self, ping: Callable[[], None], close: Callable[[], None]) -> None:
        self._ping = ping
        self._close = close
        self.ok_at: float | None = None  # monotonic time of the last successful ping
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="consolidator-db-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def problems(self) -> list[str]:
        if self.error is not None or self.ok_at is None or time.monotonic() - self.ok_at > PROBE_FRESH_S:
            return [f"database unreachable: {self.error or 'no successful check recently'}"]
        return []

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    self._ping()
                except ConsolidatorError as error:  # the store's errors: unreachable, refused, outdated
                    if self.error is None:
                        log.warning("database check failed; not ready", extra={"error": str(error)})
                    self.error = f"{type(error).__name__}: {error}"
                else:
                    self.ok_at, self.error = time.monotonic(), None
                self._stop.wait(PROBE_EVERY_S)
        finally:
            self._close()


class HealthServer:
    def __init__(self, port: int, live: Check, ready: Check, metrics: Callable[[], str]) -> None:
        self._live, self._ready, self._metrics = live, ready, metrics
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # probes every few seconds: not logged
                pass

            def do_GET(self) -> None:
                server._answer(self)

        self._server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="consolidator-http", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("health and metrics endpoints serving", extra={"port": self.port})

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _answer(self, request: BaseHTTPRequestHandler) -> None:
        path = request.path.split("?", 1)[0]
        if path == "/metrics":
            body, status, kind = self._metrics().encode(), 200, CONTENT_TYPE
        elif path in ("/healthz", "/readyz"):
            problems = (self._live if path == "/healthz" else self._ready)()
            status = 503 if problems else 200
            body = json.dumps({"ok": not problems, "problems": problems}).encode()
            kind = "application/json"
        else:
            body, status, kind = b'{"error": "not found: /healthz, /readyz, /metrics"}', 404, "application/json"
        request.send_response(status)
        request.send_header("Content-Type", kind)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)
