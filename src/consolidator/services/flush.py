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
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from consolidator.rules.batch import MessageOptions, build_message, encode
from consolidator.rules.clock import Clock
from consolidator.rules.deadletter import dead_batch_entry, unbuilt_batch_entry
from consolidator.rules.errors import LockUnavailable, StoreError, StoreRefused, StoreUnavailable
from consolidator.rules.policy import (
    FlushReason,
    GroupStats,
    Policy,
    RateLimit,
    due_groups,
    expiry_cutoff_ms,
)
from consolidator.rules.tracecontext import TraceContext
from consolidator.services.due import DueGroup, due_groups_now, rate_limits
from consolidator.services.expiry import Expiry
from consolidator.services.flush_claim import ClaimStep, Group, Tick
from consolidator.services.flush_report import (
    REASON_METRICS,
    PublishedBatch,
    TickReport,
)
from consolidator.services.metrics import MetricsRecorder, NoMetrics
from consolidator.services.spans import end_publish_span, start_publish_span
from consolidator.sinks import OutgoingBatch, Sink
from consolidator.sinks.deadletter import DeadLetter
from consolidator.store.completion import SealedBatch
from consolidator.store.lock import RedisLock
from consolidator.store.mysql import ClaimedBatch, MySQLStore
from consolidator.support import tracing
from consolidator.support.collector import collector_paused

log = logging.getLogger(__name__)
UNBOUNDED_MS = 2**62  # the time left of a tick without a deadline

@dataclass
class _Pending:
    """A batch about to be published: the claim and its attempt number (failed publishes + 1)."""

    batch: ClaimedBatch
    attempt: int
    body: bytes
    seal: SealedBatch | None = None  # completion tracking on: what the seal records
    contexts: tuple[TraceContext, ...] = ()  # the members' trace contexts, batch order
    traceparent: str | None = None  # the message's own (a member had a trace context)


@dataclass
class FlushService:
    store: MySQLStore
    sink: Sink
    dead_letter: DeadLetter
    policy: Policy
    clock: Clock
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
                         MessageOptions.of(self.policy, self.completion_tracking))
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

    def _unloadable(self, head: dict, error: Exception, report: TickReport) -> None:
        """A CLAIMED batch whose rows cannot be read (an unexpected error): a failed attempt, and
        after ``max_attempts`` a dead batch whose entry holds its id and group."""
        reason = f"batch not loaded: {type(error).__name__}: {error}"
        report.build_failures += 1
        report.publish_failures += 1
        self.metrics.add_metric(name="BatchBuildFailures", unit="Count", value=1)
        self.metrics.add_metric(name="PublishFailures", unit="Count", value=1)
        log.error("claimed batch %s not loaded: %s", head["batch_id"], reason, exc_info=error,
                  extra={"batch_id": head["batch_id"], "group_key": head["group_key"]})
        try:
            failures = self.store.record_failure(head["batch_id"], reason)
        except StoreError as store_error:
            log.warning("failure not recorded", extra={"batch_id": head["batch_id"], "error": str(store_error)})
            return
        if failures is not None and failures >= self.max_attempts:
            entry = unbuilt_batch_entry(head["batch_id"], head["group_key"], None, failures, reason,
                                        self.clock.now_ms())
            self._dead_letter_batch(head["batch_id"], entry, failures, reason, report)

    def _expiry(self) -> Expiry:
        return Expiry(self.store, self.dead_letter, self.clock, self.metrics, self.policy.max_batch_size,
                      self._epochs)

    def _deliver(self, batches: list[ClaimedBatch], report: TickReport) -> None:
        """Publish the batches still CLAIMED, wait for confirmation, mark the confirmed ones SENT
        in one conditional statement, and count a failure for each rejected one. A chunk whose
        mark fails stays CLAIMED and is re-published, under the same ids, next tick."""
        if not batches:
            return
        try:
            failed_before = self.store.begin_publish([b.batch_id for b in batches], self.clock.now_ms())
            ack_key = self._tracking_key()
        except StoreError as error:
            log.warning("batches not checked before publishing; they stay CLAIMED for the next tick",
                        extra={"batch_ids": [b.batch_id for b in batches], "error": str(error)})
            return
        pending: list[_Pending] = []
        for batch in batches:
            if batch.batch_id not in failed_before:
                log.info("batch no longer CLAIMED; not publishing", extra={"batch_id": batch.batch_id})
                continue
            attempt = failed_before[batch.batch_id] + 1
            traces = batch.trace_contexts  # read with its members, at the claim or at the reload
            try:
                message = build_message(batch.group_key, batch.members, batch.reason, batch.claimed_at_ms,
                                        ack_key=ack_key, held_back_ms=batch.held_back_ms, assigned_id=batch.batch_id,
                                        shape=self.policy.shape, event_times=self.policy.event_times,
                                        trace_contexts=traces)
                body = encode(message)
                seal = SealedBatch.of_message(message) if self.completion_tracking else None
            except Exception as error:  # noqa: BLE001 - this batch only: a failed attempt, retried, then dead
                self._unbuilt(_Pending(batch, attempt, b""), error, report)
                continue
            pending.append(_Pending(batch, attempt, body, seal, traces, message.get("traceparent")))
        if not pending:
            return
        if self.completion_tracking and not self._seal(pending):
            return
        spans = self._publish_spans(pending)
        errors = self.sink.publish([
            OutgoingBatch(p.batch.batch_id, p.batch.group_key, p.body,
                          p.traceparent or (None if spans is None else tracing.traceparent_of(spans[i])))
            for i, p in enumerate(pending)])
        for index, span in enumerate(spans or ()):
            end_publish_span(span, errors.get(index))
        delivered = [item for index, item in enumerate(pending) if index not in errors]
        for index, item in enumerate(pending):
            if index in errors:
                self._failed(item, errors[index], report)
        if not delivered:
            return
        published_at = self.clock.now_ms()
        try:
            marked = self.store.mark_sent_many([item.batch.batch_id for item in delivered], published_at)
        except StoreError as error:
            for item in delivered:
                log.error("batch published but not marked; it will be re-published",
                          extra={"batch_id": item.batch.batch_id, "error": str(error)})
            return
        for item in delivered:
            batch = item.batch
            if batch.batch_id not in marked:
                log.info("batch published again after another flusher finished it",
                         extra={"batch_id": batch.batch_id})
            log.info("batch published", extra={"batch_id": batch.batch_id, "group_key": batch.group_key,
                                               "reason": str(batch.reason), "attempt": item.attempt,
                                               "size": len(batch.members)})
            report.published.append(PublishedBatch(batch.batch_id, batch.group_key, batch.reason,
                                                   len(batch.members), item.attempt))
            self.metrics.add_metric(name="BatchesFlushed", unit="Count", value=1)
            self.metrics.add_metric(name=REASON_METRICS[batch.reason], unit="Count", value=1)
            self.metrics.add_metric(name="BatchSize", unit="Count", value=len(batch.members))
            oldest = min(m.first_seen_ms for m in batch.members)
            self.metrics.add_metric(name="EventToPublishLatency", unit="Milliseconds",
                                    value=max(0, published_at - oldest))

    def _publish_spans(self, pending: list[_Pending]) -> list | None:
        """While tracing is on, one started span per batch about to be published, each linked to
        its members' trace contexts (:mod:`consolidator.services.spans`) and, when its message
        carries a ``traceparent``, with the span id that names; None while tracing is off."""
        if tracing.tracer() is None:
            return None
        now = self.clock.now_ms()
        destination = getattr(self.sink, "destination", "batches")
        system = getattr(self.sink, "messaging_system", "unknown")
        spans = []
        for p in pending:
            with tracing.span_id_of(p.traceparent):
                spans.append(start_publish_span(
                    destination, system, p.batch.batch_id, p.batch.group_key, str(p.batch.reason),
                    len(p.batch.members), p.attempt,
                    max(0, now - min((m.first_seen_ms for m in p.batch.members), default=now)), p.contexts))
        return spans

    def _tracking_key(self) -> bytes | None:
        """The ack key (read from the store once) when completion tracking is on, else None."""
        if self.completion_tracking and self._ack_key is None:
            self._ack_key = self.store.ack_key()
        return self._ack_key if self.completion_tracking else None

    def _seal(self, pending: list[_Pending]) -> bool:
        """Completion tracking: seal the batches (idempotent, one transaction) before they are
        published, so no tracked message leaves unsealed. False: not sealed, not published;
        the batches stay CLAIMED for the next tick."""
        try:
            self.store.seal([p.seal for p in pending], self.clock.now_ms())
        except StoreError as error:
            log.warning("batches not sealed; not published this tick",
                        extra={"batch_ids": [p.batch.batch_id for p in pending], "error": str(error)})
            return False
        return True

    def _unbuilt(self, item: _Pending, error: Exception, report: TickReport) -> None:
        """The batch's message could not be built (an unexpected error): a failed attempt, as a
        publish the sink refused, counted also in ``BatchBuildFailures``."""
        report.build_failures += 1
        self.metrics.add_metric(name="BatchBuildFailures", unit="Count", value=1)
        log.error("message of batch %s not built", item.batch.batch_id, exc_info=error,
                  extra={"batch_id": item.batch.batch_id, "group_key": item.batch.group_key})
        self._failed(item, f"message not built: {type(error).__name__}: {error}", report)

    def _failed(self, item: _Pending, error: str, report: TickReport) -> None:
        batch = item.batch
        report.publish_failures += 1
        self.metrics.add_metric(name="PublishFailures", unit="Count", value=1)
        # everything an operator needs in the message itself: plain log formats drop the extras
        log.warning("publish failed for batch %s (group %s, attempt %d); it stays CLAIMED: %s",
                    batch.batch_id, batch.group_key, item.attempt, error,
                    extra={"batch_id": batch.batch_id, "group_key": batch.group_key, "attempt": item.attempt,
                           "error": error})
        try:
            failures = self.store.record_failure(batch.batch_id, error)
        except StoreError as store_error:  # not counted: the batch stays CLAIMED and is retried
            log.warning("publish failure not recorded", extra={"batch_id": batch.batch_id,
                                                               "error": str(store_error)})
            return
        if failures is not None and failures >= self.max_attempts:
            self._bury(batch, failures, error, report)

    def _bury(self, batch: ClaimedBatch, attempts: int, error: str, report: TickReport) -> None:
        """Dead-letter the batch with its last error and its message as published (its
        ``traceparent`` included); mark it DEAD only once that is confirmed. A batch whose message
        cannot be built is dead-lettered with its members' positions."""
        now, ack_key = self.clock.now_ms(), self._tracking_key()
        try:
            message = build_message(batch.group_key, batch.members, batch.reason, batch.claimed_at_ms,
                                    ack_key=ack_key, held_back_ms=batch.held_back_ms, assigned_id=batch.batch_id,
                                    shape=self.policy.shape, event_times=self.policy.event_times,
                                    trace_contexts=batch.trace_contexts)
            entry = dead_batch_entry(message, attempts, error, now)
        except Exception as build_error:  # noqa: BLE001 - why it died, most likely: the entry holds what is known
            log.warning("dead batch's message not built; dead-lettered without it",
                        extra={"batch_id": batch.batch_id, "error": f"{type(build_error).__name__}: {build_error}"})
            entry = unbuilt_batch_entry(batch.batch_id, batch.group_key, batch.members, attempts, error, now)
        self._dead_letter_batch(batch.batch_id, entry, attempts, error, report)

    def _dead_letter_batch(self, batch_id: str, entry: dict, attempts: int, error: str, report: TickReport) -> None:
        """Send the dead batch's entry; mark the batch DEAD only once the write is confirmed."""
        now = self.clock.now_ms()
        if self.dead_letter.send([entry]):
            log.error("dead-letter write failed; batch stays CLAIMED and is retried next tick",
                      extra={"batch_id": batch_id, "attempts": attempts})
            return
        try:
            marked = self.store.mark_dead(batch_id, now, error)
        except StoreError as store_error:
            log.error("dead-lettered batch not marked DEAD; retried next tick (duplicate entry possible)",
                      extra={"batch_id": batch_id, "error": str(store_error)})
            return
        if marked:
            report.dead += 1
            self.metrics.add_metric(name="DeadBatches", unit="Count", value=1)
            log.error("batch is DEAD after max attempts; sent to the dead-letter destination",
                      extra={"batch_id": batch_id, "attempts": attempts, "error": error})
        else:
            log.info("batch finished by another flusher before it was marked DEAD", extra={"batch_id": batch_id})

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
