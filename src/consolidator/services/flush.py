"""Flush use case: due groups -> claimed batches -> published messages -> SENT rows.

Guarantees (docs/semantics.md sections 5 and 9):
- a batch id is assigned once, at claim time, from the group key and the members' source
  positions; every re-publish of it carries the same id and the same bytes (``flushed_at``
  is the claim time), so an event never appears under two batch ids (D, B);
- rows are marked SENT only after the sink confirmed the message, by a statement
  conditional on the batch id and CLAIMED; delivery is at least once;
- CLAIMED batches are re-published first on every tick; after ``max_attempts`` failed
  publishes a batch goes to the dead-letter destination and only then becomes DEAD (S, L).
  Only a publish the sink rejected counts: a flusher that dies after the send, before it
  learned the outcome or before the mark, has not failed a publish, however often it happens;
- the Redis lock only avoids duplicate work: two flushers at once stay correct because
  claims and marks are conditional statements in the store;
- rate limit (per group, the policy's default or the group's override from the store): each
  claim checks and updates the group's rate state in its own transaction; a refused group
  stays PENDING and the tick moves on to the next group (``GroupsThrottled``);
- TTL: rows of a due group whose newest event is older than ``policy.ttl_ms`` are claimed under
  an expiry record, written to the dead-letter destination (reason ``expired``) and only then
  marked EXPIRED (``EventsExpired``); until confirmed they stay CLAIMED and are retried.

The tick's steps live beside it: the claim (``flush_claim.py``), the delivery of claimed batches
(``flush_publish.py``), failed attempts and dead batches (``flush_failures.py``), the report
(``flush_report.py``); the wiring from settings is ``flush_setup.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from consolidator.rules.clock import Clock
from consolidator.rules.errors import LockUnavailable, StoreError, StoreRefused, StoreUnavailable
from consolidator.rules.events import DEFAULT_NAMES, FieldNames
from consolidator.rules.policy import (
    FlushReason,
    GroupStats,
    Policy,
    RateLimit,
    due_groups,
    expiry_cutoff_ms,
)
from consolidator.rules.split import MessageOptions
from consolidator.services.due import DueGroup, due_groups_now, rate_limits
from consolidator.services.expiry import Expiry
from consolidator.services.flush_claim import ClaimStep, Group, Tick
from consolidator.services.flush_failures import FailedBatches
from consolidator.services.flush_publish import Publishing
from consolidator.services.flush_report import TickReport
from consolidator.services.metrics import MetricsRecorder, NoMetrics
from consolidator.sinks import Sink
from consolidator.sinks.deadletter import DeadLetter
from consolidator.store.lock import RedisLock
from consolidator.store.mysql import ClaimedBatch, MySQLStore
from consolidator.support.collector import collector_paused

log = logging.getLogger(__name__)
UNBOUNDED_MS = 2**62  # the time left of a tick without a deadline

@dataclass
class FlushService(Publishing, FailedBatches):
    store: MySQLStore
    sink: Sink
    dead_letter: DeadLetter
    policy: Policy
    clock: Clock
    names: FieldNames = DEFAULT_NAMES  # the events' field names: the messages take their shape and event times
    max_attempts: int = 5
    max_rows_per_tick: int = 20_000
    metrics: MetricsRecorder = field(default_factory=NoMetrics)
    lock: RedisLock | None = None
    publish_chunk: int = 20  # batches handed to the sink per call
    safety_margin_ms: int = 5_000  # no new claim when less time than this remains
    completion_tracking: bool = False  # seal batches before their first publish
    _epochs: dict[str, int] = field(default_factory=dict, init=False, repr=False)  # topic epochs, this tick
    _ack_key: bytes | None = field(default=None, init=False, repr=False)  # read once, never logged

    # -- the policy, read only ---------------------------------------------------------------

    def due(self) -> list[tuple[GroupStats, FlushReason]]:
        """Dry run: the groups due now with their reasons, oldest first. Claims nothing."""
        return due_groups(self.store.pending_group_stats(), self.clock.now_ms(), self.policy)

    def dry_run(self) -> list[DueGroup]:
        """:func:`due_groups_now` at the service's clock. Claims nothing, writes nothing."""
        return due_groups_now(self.store, self.policy, self.clock.now_ms())

    def _limits(self) -> dict[str, RateLimit]:
        return rate_limits(self.store, self.policy)

    def _limit(self, limits: dict[str, RateLimit], group_key: str) -> RateLimit | None:
        return limits.get(group_key, self.policy.rate_limit)

    # -- one tick ----------------------------------------------------------------------------

    def tick(self, remaining_ms: Callable[[], int] | None = None) -> TickReport:
        """One tick at ``clock.now_ms()``: re-publish CLAIMED batches, then claim, publish and
        mark due groups. Takes the lock when one is configured; a held lock or an unreachable
        Redis skips the tick (counted in ``TicksSkipped``). ``remaining_ms`` bounds the tick's
        time (no new work when less than ``safety_margin_ms`` remains).

        Raises :class:`StoreUnavailable` when the database is down (nothing is lost: rows stay
        PENDING or CLAIMED and the next tick resumes)."""
        report = TickReport()
        if self.lock is not None:
            try:
                held = self.lock.acquire()
            except LockUnavailable as error:
                log.warning("flush tick skipped: no flush lock", extra={"error": str(error)})
                report.skipped = "lock_unavailable"
                report.error = str(error)
            else:
                if not held:
                    log.info("flush tick skipped: another flusher holds the lock")
                    report.skipped = "lock_held"
            if report.skipped:
                self.metrics.add_metric(name="TicksSkipped", unit="Count", value=1)
                return report
        try:
            self._work(report, self._within_lease(remaining_ms, report))
        finally:
            if self.lock is not None:
                try:
                    if not self.lock.release():
                        log.warning("flush lock had expired before the tick ended")
                except LockUnavailable as error:
                    log.warning("flush lock not released; it expires by TTL", extra={"error": str(error)})
        return report

    def _within_lease(self, remaining_ms: Callable[[], int] | None,
                      report: TickReport) -> Callable[[], int] | None:
        """``remaining_ms``, or 0 once the tick's lock is no longer held (its TTL ran out, another
        flusher took it, Redis lost it): the tick then makes no further claim or re-publish. The
        batches it claimed already are still delivered (correctness never depends on the lock)."""
        if self.lock is None:
            return remaining_ms

        def remaining() -> int:
            if not report.lock_lost and not self.lock.still_held():
                report.lock_lost = True
                self.metrics.add_metric(name="FlushLockLost", unit="Count", value=1)
                log.warning("flush lock lost mid-tick; no further claim this tick")
            if report.lock_lost:
                return 0
            return UNBOUNDED_MS if remaining_ms is None else remaining_ms()

        return remaining

    def _time_left(self, remaining_ms: Callable[[], int] | None) -> bool:
        return remaining_ms is None or remaining_ms() > self.safety_margin_ms

    def _work(self, report: TickReport, remaining_ms: Callable[[], int] | None) -> None:
        """The tick's steps: re-publish what earlier ticks left CLAIMED (:meth:`_republish`);
        then, group by group among the due ones, oldest first, expire its rows over the TTL and
        claim its batches (:class:`~consolidator.services.flush_claim.ClaimStep`); the claimed
        batches are delivered, published then marked SENT (:meth:`_deliver`), a chunk at a time.
        Every step stops when the tick is out of rows or time (:meth:`Tick.has_room`)."""
        tick = Tick(self.clock.now_ms(), remaining_ms, report, self.max_rows_per_tick, self.safety_margin_ms)
        tick.rows = self._republish(report, tick.now, remaining_ms)
        stats = self.store.pending_group_stats()
        oldest = min((s.oldest_first_seen_ms for s in stats), default=tick.now)
        self.metrics.add_metric(name="PendingGroups", unit="Count", value=len(stats))
        self.metrics.add_metric(name="OldestPendingAge", unit="Milliseconds", value=max(0, tick.now - oldest))
        limits = self._limits() if stats else {}
        self._epochs = self.store.topic_epochs() if stats else {}  # the batch ids' topic epochs, this tick
        tick.cutoff = expiry_cutoff_ms(tick.now, self.policy)
        step = ClaimStep(self.store, self.policy, self.metrics, self._epochs, self._expiry,
                         lambda batches: self._deliver(batches, report), self.publish_chunk,
                         MessageOptions.of(self.policy, self.completion_tracking, shape=self.names.shape))
        for stat, reason in due_groups(stats, tick.now, self.policy):
            group = Group(stat.group_key, reason, stat.pending, self._limit(limits, stat.group_key),
                          self.policy.max_batch_size)
            step.expire(tick, group, stat.oldest_record_ts_ms)
            with collector_paused():  # the claim's rows are parsed JSON: trees, no cycles (consolidator/support/collector.py)
                step.claim(tick, group)
        self._deliver(tick.outbox, report)

    def _republish(self, report: TickReport, now: int, remaining_ms: Callable[[], int] | None) -> int:
        """Re-publish CLAIMED batches (oldest claim first) under their ids; bury those out of
        attempts. Returns the rows handled, which count against ``max_rows_per_tick``."""
        rows = 0
        heads = self.store.batches_in_state("CLAIMED", limit=max(1, self.max_rows_per_tick // 10))
        chunk: list[ClaimedBatch] = []
        for head in heads:
            if rows >= self.max_rows_per_tick or not self._time_left(remaining_ms):
                break
            if head["kind"] == "expiry":  # its dead-letter write failed on an earlier tick
                try:
                    expiry = self.store.load_expiry(head["batch_id"])
                except StoreError as error:
                    log.warning("expired rows not loaded; retried next tick",
                                extra={"batch_id": head["batch_id"], "error": str(error)})
                    continue
                if expiry is not None and expiry.members:
                    rows += len(expiry.members)
                    report.expired += self._expiry().settle(expiry)
                continue
            try:
                batch = self.store.load_batch(head["batch_id"])
            except StoreError as error:
                log.warning("claimed batch not loaded; retried next tick",
                            extra={"batch_id": head["batch_id"], "error": str(error)})
                continue
            except (StoreUnavailable, StoreRefused):
                raise
            except Exception as error:  # noqa: BLE001 - rows this code cannot read: this batch only, counted
                rows += 1
                self._unloadable(head, error, report)
                continue
            if batch is None or not batch.members:
                continue  # finished by another flusher meanwhile
            rows += len(batch.members)
            if batch.attempts >= self.max_attempts:
                # its dead-letter write failed on an earlier tick: try that again, do not publish
                self._bury(batch, batch.attempts, head["last_error"] or "max attempts reached", report)
                continue
            log.info("re-publishing claimed batch", extra={"batch_id": batch.batch_id,
                                                           "attempts": batch.attempts})
            chunk.append(batch)
            if len(chunk) >= self.publish_chunk:
                self._deliver(chunk, report)
                chunk = []
        self._deliver(chunk, report)
        return rows

    def _expiry(self) -> Expiry:
        return Expiry(self.store, self.dead_letter, self.clock, self.metrics, self.policy.max_batch_size,
                      self._epochs)

    # -- one invocation ----------------------------------------------------------------------

    def run(self, remaining_ms: Callable[[], int], sleep: Callable[[float], None] = time.sleep,
            on_tick: Callable[[TickReport], None] | None = None) -> list[TickReport]:
        """Tick every ``policy.tick_interval_ms`` (by ``clock``) while the invocation's remaining
        time allows one more tick plus a safety margin (``safety_margin_ms``, at most a fifth of
        the time available at the start). ``on_tick`` sees each report as soon as its tick ends."""
        margin = min(self.safety_margin_ms, remaining_ms() // 5)
        reports: list[TickReport] = []
        while remaining_ms() > margin:
            started = self.clock.now_ms()
            reports.append(self.tick(remaining_ms=lambda: remaining_ms() - margin + self.safety_margin_ms))
            if on_tick is not None:
                on_tick(reports[-1])
            wait_ms = max(0, started + self.policy.tick_interval_ms - self.clock.now_ms())
            if remaining_ms() - wait_ms <= 2 * margin:
                break
            if wait_ms:
                sleep(wait_ms / 1000)
        return reports
