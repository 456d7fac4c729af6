"""The flush loop: the flush service's tick (the Lambda function's, lock included) every
``tick_interval``, in its own thread.

Every worker runs it; the Redis lock lets one tick run at a time across the fleet, and a tick
whose lock is lost stops claiming (:meth:`FlushService.tick`). Correctness never depends on the
lock. A tick that fails (the database down) is logged and counted; the next one resumes. On
stop, the tick in progress makes no further claim, delivers what it claimed, releases the lock.
"""

from __future__ import annotations

import logging
import threading
import time

from consolidator.rules.errors import ConsolidatorError, StoreUnavailable
from consolidator.services.flush import UNBOUNDED_MS, FlushService
from consolidator.services.metrics import MetricsRecorder

log = logging.getLogger(__name__)


class FlushLoop:
    def __init__(self, service: FlushService, metrics: MetricsRecorder) -> None:
        self.service = service
        self.metrics = metrics
        self.interval_s = service.policy.tick_interval_ms / 1000
        self.beat = time.monotonic()  # the last tick's start or end (liveness)
        self.ticks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="consolidator-flush", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """The tick in progress claims nothing more; no tick starts after it."""
        self._stop.set()

    def join(self, timeout_s: float) -> bool:
        self._thread.join(max(0.0, timeout_s))
        return not self._thread.is_alive()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def longest_tick_s(self) -> float:
        """How long a tick may run: the lock's TTL (a tick past it claims nothing more)."""
        lock = self.service.lock
        return lock.ttl_ms / 1000 if lock is not None else 0.0

    @property
    def lock_held(self) -> bool:
        lock = self.service.lock
        return lock is not None and lock.token is not None

    def _remaining_ms(self) -> int:
        return 0 if self._stop.is_set() else UNBOUNDED_MS

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                started = self.beat = time.monotonic()
                self._tick()
                self.beat = finished = time.monotonic()
                self.ticks += 1
                self.metrics.add_metric(name="FlushTickDuration", unit="Seconds", value=finished - started)
                self._stop.wait(max(0.0, started + self.interval_s - finished))
        finally:
            self.service.sink.close()
            self.service.store.close()

    def _tick(self) -> None:
        try:
            report = self.service.tick(remaining_ms=self._remaining_ms)
        except StoreUnavailable as error:
            self.metrics.add_metric(name="FlushTickFailures", unit="Count", value=1)
            log.warning("flush tick failed: database unavailable; the next tick resumes",
                        extra={"error": str(error)})
            return
        except ConsolidatorError as error:
            self.metrics.add_metric(name="FlushTickFailures", unit="Count", value=1)
            log.error("flush tick failed; the next tick resumes", extra={"error": str(error)})
            return
        except Exception:
            # a bug, not an outage: logged with its traceback and counted; rows stay PENDING or CLAIMED
            self.metrics.add_metric(name="FlushTickFailures", unit="Count", value=1)
            log.exception("flush tick raised; the next tick resumes")
            return
        if report.published or report.publish_failures or report.dead or report.expired:
            log.info("flush tick", extra={"published": len(report.published), "publish_failures":
                                          report.publish_failures, "dead": report.dead, "expired": report.expired,
                                          "throttled": len(report.throttled), "lock_lost": report.lock_lost})
