"""Ack use case: member acks -> tracker bits -> one completion message per batch.

Guarantees (docs/semantics.md section 8, completion tracking):
- an ack from the acks queue (:meth:`AckService.handle_bodies`) is applied only when it carries
  its batch's ``ack_token`` (compared in constant time): only a recipient of the batch message
  can acknowledge it;
- an ack is applied idempotently: a member acknowledged twice counts once;
- a *refused* ack (``bad_ack``, ``bad_token``, ``unknown_batch``, ``unknown_member``,
  ``unknown_item``) is final: counted once (``AcksRefused``), logged, and consumed, never
  retried; the members of the same ack that are known are still applied;
- a *failed* ack (an unexpected error while applying it alone) is not applied; it is reported
  for a retry (per record: the other acks of the call proceed) and counted (``AcksFailed``);
  a database that cannot be reached fails the whole call (:class:`StoreUnavailable`);
- acks count whatever the batch's publish state (a fast consumer may ack before the flusher
  marked the batch SENT): only the seal matters;
- the ack that completes a batch stores the completion message's bytes in the outbox in its
  own transaction and publishes them only after the commit, so no tracker stays locked while
  a sink is slow. A publish that fails, or a process that dies before it or before the mark,
  leaves the outbox PENDING: :meth:`AckService.sweep` re-publishes the stored bytes after the
  lease. A re-delivered ack of a completed batch changes nothing and publishes nothing. Every
  copy of a completion has the same ``completion_id`` and the same bytes (at least once).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from consolidator.rules.batch import ack_token_matches
from consolidator.rules.clock import Clock
from consolidator.rules.completion import Ack, AckFormatError, completion_id, parse_ack
from consolidator.rules.errors import StoreError, StoreRefused, StoreUnavailable
from consolidator.rules.printable import echoed
from consolidator.services.metrics import MetricsRecorder, NoMetrics
from consolidator.sinks import OutgoingBatch, Sink
from consolidator.store.completion import AckResult, Tracker
from consolidator.store.mysql import MySQLStore

log = logging.getLogger(__name__)

BAD_ACK = "bad_ack"
BAD_TOKEN = "bad_token"
_FATAL = (StoreUnavailable, StoreRefused)  # not one ack's problem: the whole call fails


@dataclass
class SweepReport:
    republished: int = 0  # pending completions confirmed by the sink now
    publish_failures: int = 0
    incomplete: int = 0  # sent batches not complete after the deadline
    oldest_incomplete_age_ms: int | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class AckService:
    store: MySQLStore
    completion_sink: Sink
    clock: Clock
    metrics: MetricsRecorder = field(default_factory=NoMetrics)
    deadline_ms: int = 3_600_000  # a sent batch not complete after this is overdue
    lease_ms: int = 60_000  # a pending completion is re-published when its last attempt is this old
    _ack_key: bytes | None = field(default=None, init=False, repr=False)  # read once, never logged

    def ack(self, acks: Sequence[Ack]) -> list[AckResult]:
        """Apply ``acks`` (trusted: no token check; one transaction), then publish the
        completions they caused. One result per ack, in order. When the shared transaction
        fails, each ack is applied alone and one that fails again gets ``error`` set. Raises
        :class:`StoreUnavailable` when the database is down."""
        if not acks:
            return []
        try:
            results = self.store.apply_acks(acks, self.clock.now_ms())
        except _FATAL:
            raise
        except Exception as error:  # noqa: BLE001 - retried one by one; a lasting error fails only its ack
            if len(acks) == 1:
                results = [self._failed(acks[0], error)]
            else:
                log.warning("ack transaction failed; applying acks one by one", extra={"error": str(error)})
                results = [self._one(ack) for ack in acks]
        confirmed = set(self._publish_after_commit([r.completed for r in results if r.completed is not None]))
        for result in results:
            if result.completed is not None and result.completed.batch_id in confirmed:
                result.completed = replace(result.completed, outbox="PUBLISHED", published_at_ms=self.clock.now_ms())
        self._count(results)
        return results

    def _one(self, ack: Ack) -> AckResult:
        try:
            return self.store.apply_acks([ack], self.clock.now_ms())[0]
        except _FATAL:
            raise
        except Exception as error:  # noqa: BLE001 - this ack fails alone (logged with its traceback)
            return self._failed(ack, error)

    @staticmethod
    def _failed(ack: Ack, error: Exception) -> AckResult:
        kind = "store_error" if isinstance(error, StoreError) else "internal_error"
        log.error("ack not applied; it is retried", exc_info=error, extra={"batch_id": ack.batch_id})
        return AckResult(ack.batch_id, error=f"{kind}: {type(error).__name__}: {error}")

    def _count(self, results: Sequence[AckResult]) -> None:
        """Metrics once per call (not per ack), a warning per refused or failed ack."""
        self.metrics.add_metric(name="AcksApplied", unit="Count", value=sum(r.newly_acked for r in results))
        duplicates = sum(r.duplicates for r in results)
        if duplicates:
            self.metrics.add_metric(name="AcksDuplicate", unit="Count", value=duplicates)
        refused = [r for r in results if r.refused]
        if refused:
            self.metrics.add_metric(name="AcksRefused", unit="Count", value=len(refused))
        for result in refused:
            log.warning("ack refused", extra={"batch_id": result.batch_id, "refused_count": len(result.refused),
                                              "refused": [{"member": echoed(m) if isinstance(m, str) else m,
                                                           "reason": r} for m, r in result.refused[:10]]})
        failed = [r for r in results if r.error]
        if failed:
            self.metrics.add_metric(name="AcksFailed", unit="Count", value=len(failed))
        for result in failed:
            log.warning("ack failed; retried", extra={"batch_id": result.batch_id, "error": result.error})

    def handle_bodies(self, bodies: dict[str, str]) -> dict[str, str | None]:
        """Acks from the acks queue, keyed by message id -> ``{message id: why to retry it, or
        None}``. None: applied, or refused for good (malformed: ``bad_ack``; without its
        batch's ack token: ``bad_token``; unknown batch or member), counted once and consumed.
        A reason: the ack failed (not applied) and should come again. No ack fails its neighbours."""
        outcome: dict[str, str | None] = {}
        parsed: list[tuple[str, Ack]] = []
        key = self._key() if bodies else b""
        for message_id, body in bodies.items():
            try:
                ack = parse_ack(body)
            except AckFormatError as error:
                self._refuse(outcome, message_id, BAD_ACK, str(error))
                continue
            if not ack_token_matches(key, ack.batch_id, ack.token):
                self._refuse(outcome, message_id, BAD_TOKEN, f"batch {ack.batch_id}: ack_token missing or wrong")
                continue
            parsed.append((message_id, ack))
        results = self.ack([a for _, a in parsed])
        for (message_id, _), result in zip(parsed, results, strict=True):
            outcome[message_id] = result.error
        return outcome

    def _refuse(self, outcome: dict[str, str | None], message_id: str, reason: str, detail: str) -> None:
        outcome[message_id] = None  # final: consumed, not retried into the dead-letter queue
        self.metrics.add_metric(name="AcksRefused", unit="Count", value=1)
        log.warning("ack refused", extra={"message_id": message_id, "reason": reason, "error": detail})

    def _key(self) -> bytes:
        if self._ack_key is None:
            self._ack_key = self.store.ack_key()
        return self._ack_key

    def _publish(self, trackers: Sequence[Tracker]) -> list[str]:
        """Publish the stored completion bytes; returns the batch ids the sink confirmed. A
        failure is counted and left PENDING for :meth:`sweep` (same bytes)."""
        errors = self.completion_sink.publish([
            OutgoingBatch(completion_id(t.batch_id), t.group_key, t.completion()) for t in trackers
        ])
        for index, error in errors.items():
            self.metrics.add_metric(name="CompletionPublishFailures", unit="Count", value=1)
            log.warning("completion not published; re-published after the lease",
                        extra={"batch_id": trackers[index].batch_id, "error": error})
        return sorted(t.batch_id for i, t in enumerate(trackers) if i not in errors)

    def _publish_after_commit(self, trackers: Sequence[Tracker]) -> list[str]:
        """Publish completions whose bytes are committed, mark the confirmed ones PUBLISHED.
        Returns the confirmed batch ids. A mark that fails leaves them PENDING: the sweep sends
        the same bytes again."""
        if not trackers:
            return []
        confirmed = self._publish(trackers)
        if confirmed:
            try:
                self.store.mark_completions_published(confirmed, self.clock.now_ms())
            except (StoreError, StoreUnavailable) as error:
                log.warning("completions published but not marked", extra={"batch_ids": confirmed,
                                                                           "error": str(error)})
            for batch_id in confirmed:
                log.info("batch complete", extra={"batch_id": batch_id})
            self.metrics.add_metric(name="BatchesCompleted", unit="Count", value=len(confirmed))
        return confirmed

    def sweep(self, limit: int = 100) -> SweepReport:
        """Re-publish pending completions whose lease expired; measure overdue batches
        (``IncompleteBatches``, ``OldestIncompleteAge``). Run on a schedule."""
        now = self.clock.now_ms()
        report = SweepReport()
        leased = self.store.lease_completions(now, self.lease_ms, limit)
        confirmed = self._publish_after_commit(leased)
        report.republished, report.publish_failures = len(confirmed), len(leased) - len(confirmed)
        report.incomplete, oldest = self.store.incomplete_summary(now - self.deadline_ms)
        report.oldest_incomplete_age_ms = None if oldest is None else now - oldest
        self.metrics.add_metric(name="IncompleteBatches", unit="Count", value=report.incomplete)
        self.metrics.add_metric(name="OldestIncompleteAge", unit="Milliseconds",
                                value=report.oldest_incomplete_age_ms or 0)
        return report


def build_ack_service(settings, metrics: MetricsRecorder | None = None, clock: Clock | None = None) -> AckService:
    """Wire the service from :class:`~consolidator.settings.AckSettings`."""
    from consolidator.rules.clock import SystemClock
    from consolidator.sinks import sink_from_url
    from consolidator.store import open_store

    return AckService(
        store=open_store(settings.database_url, settings.database_secret_arn),
        completion_sink=sink_from_url(settings.completion_sink_url, timeout_s=settings.sink_timeout_seconds),
        clock=clock or SystemClock(),
        metrics=metrics or NoMetrics(),
        deadline_ms=round(settings.completion_deadline_seconds * 1000),
        lease_ms=round(settings.completion_lease_seconds * 1000),
    )
