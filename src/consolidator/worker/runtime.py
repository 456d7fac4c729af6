"""The worker runtime: the parts of one ``consolidator worker`` process, built from its settings,
started together and stopped within a bound.

- role ``ingest``: the poll loop (Kafka) and the writer (the ingest service) around the ledger;
- role ``flush``: the flush loop (the flush service, the Redis lock);
- role ``all`` (the default): both;
- with a port: the health and metrics endpoints, and a database check for ``/readyz``.

Stopping (:meth:`Worker.request_stop`, a signal): fetching stops, the write in flight finishes or
is abandoned at ``worker_write_wait_seconds``, durable offsets are committed, the consumer
leaves its group, the flush tick in progress claims nothing more and releases the lock; all
within ``worker_shutdown_seconds``. Whatever is not committed is delivered again (replays).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from consolidator.support import tracing
from consolidator.worker.consumer import ConsumerPlan, PollLoop
from consolidator.worker.flusher import FlushLoop
from consolidator.worker.health import DatabaseProbe, HealthServer
from consolidator.worker.ledger import Ledger
from consolidator.worker.metrics import PrometheusRegistry
from consolidator.worker.writer import Writer

log = logging.getLogger(__name__)
ROLES = ("all", "ingest", "flush")
LIVE_WITHIN_S = 30.0  # /healthz: the poll loop iterated within this long
EXIT_OK, EXIT_FAILED = 0, 1


@dataclass
class Worker:
    role: str
    metrics: PrometheusRegistry
    shutdown_s: float
    poll: PollLoop | None = None
    writer: Writer | None = None
    flusher: FlushLoop | None = None
    probe: DatabaseProbe | None = None
    http_port: int | None = None
    http: HealthServer | None = field(default=None, init=False)
    stop_reason: str | None = field(default=None, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        for part in (self.writer, self.poll, self.flusher, self.probe):
            if part is not None:
                part.start()
        if self.http_port is not None:
            self.http = HealthServer(self.http_port, self.live_problems, self.ready_problems, self.render_metrics)
            self.http.start()
        log.info("worker started", extra={"role": self.role, "http_port": self.http.port if self.http else None})

    def request_stop(self, reason: str) -> None:
        """Begin the clean stop (any thread, a signal handler too); :meth:`run` returns after it."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._stop.set()

    def run(self) -> int:
        """Start, run until stopped (or a part fails), stop within the bound; the exit code."""
        self.start()
        code = EXIT_OK
        while not self._stop.wait(0.5):
            failure = self._failure()
            if failure:
                log.error("worker part failed; stopping", extra={"error": failure})
                self.request_stop(failure)
                code = EXIT_FAILED
        if code == EXIT_OK and self._failure():
            code = EXIT_FAILED
        self.shutdown()
        return code

    def _failure(self) -> str | None:
        if self.poll is not None and (self.poll.fatal or not self.poll.is_alive()):
            return self.poll.fatal or "the poll loop stopped"
        if self.writer is not None and not self.writer.is_alive():
            return "the writer stopped"
        if self.flusher is not None and not self.flusher.is_alive():
            return "the flush loop stopped"
        return None

    def shutdown(self) -> bool:
        """Stop every part within ``shutdown_s``; True when all stopped in time."""
        started = time.monotonic()
        deadline = started + self.shutdown_s
        log.info("worker stopping", extra={"reason": self.stop_reason, "bound_s": self.shutdown_s})
        if self.flusher is not None:
            self.flusher.stop()
        if self.poll is not None:
            self.poll.stop(deadline)
        done = True
        if self.poll is not None:
            done &= self.poll.join(deadline - time.monotonic())
        if self.writer is not None:
            self.writer.stop()
            done &= self.writer.join(max(0.0, deadline - time.monotonic()))
        if self.flusher is not None:
            done &= self.flusher.join(deadline - time.monotonic())
        if self.probe is not None:
            self.probe.stop()
        if self.http is not None:
            self.http.stop()
        tracing.flush(int(max(0.0, deadline - time.monotonic()) * 1000))  # the ended spans, within the bound
        seconds = round(time.monotonic() - started, 3)
        if done:
            log.info("worker stopped", extra={"reason": self.stop_reason, "seconds": seconds})
        else:
            log.warning("worker stopped at its bound with work abandoned; uncommitted records are delivered again",
                        extra={"reason": self.stop_reason, "seconds": seconds})
        return done

    # -- health -----------------------------------------------------------------------------

    def live_problems(self) -> list[str]:
        problems = []
        now = time.monotonic()
        if self.poll is not None and (not self.poll.is_alive() or now - self.poll.beat > LIVE_WITHIN_S):
            problems.append(f"the poll loop has not run for {now - self.poll.beat:.0f} s")
        if self.writer is not None and not self.writer.is_alive():
            problems.append("the writer stopped")
        if self.flusher is not None:
            bound = self.flusher.interval_s + self.flusher.longest_tick_s + LIVE_WITHIN_S
            if not self.flusher.is_alive() or now - self.flusher.beat > bound:
                problems.append(f"the flush loop has not ticked for {now - self.flusher.beat:.0f} s")
        return problems

    def ready_problems(self) -> list[str]:
        problems = [] if self.probe is None else self.probe.problems()
        if self.poll is not None and not self.poll.ledger.assigned():
            problems.append("no partition assigned")
        if self._stop.is_set():
            problems.append("stopping")
        return problems + self.live_problems()

    def render_metrics(self) -> str:
        if self.flusher is not None:
            self.metrics.set("FlushLockHeld", 1 if self.flusher.lock_held else 0)
        return self.metrics.render()


def build_worker(settings, role: str = "all") -> Worker:
    """Wire the worker from :class:`~consolidator.settings.WorkerSettings` (or the ingest or
    flush one of ``role``), with the services the Lambda functions build from the same settings."""
    from consolidator.services.flush_setup import build_flush_service
    from consolidator.services.ingest import build_ingest_service
    from consolidator.store import open_store

    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    metrics = PrometheusRegistry()
    worker = Worker(role, metrics, settings.worker_shutdown_seconds, http_port=settings.worker_http_port)
    if role in ("all", "ingest"):
        ledger = Ledger(settings.worker_max_buffered_records, settings.worker_batch_records)
        worker.writer = Writer(ledger, build_ingest_service(settings, metrics), metrics)
        names, pattern = settings.topics()
        plan = ConsumerPlan(settings.consumer_config(), names, pattern, settings.cooperative,
                            settings.worker_commit_interval_seconds, settings.worker_write_wait_seconds)
        worker.poll = PollLoop(plan, ledger, metrics)
        worker.poll.open()
    if role in ("all", "flush"):
        worker.flusher = FlushLoop(build_flush_service(settings, metrics), metrics)
    if settings.worker_http_port is not None:
        store = open_store(settings.database_url, settings.database_secret_arn)
        worker.probe = DatabaseProbe(store.ping, store.close)
    return worker
