"""Ack use case: member acks -> tracker bits -> one completion message per batch.

Guarantees (docs/semantics.md section 8, completion tracking):
- an ack is applied idempotently: a member acknowledged twice counts once;
- an ack naming an unknown batch, index or item id is refused with a machine-readable
  reason (``unknown_batch``, ``unknown_member``, ``unknown_item``, ``bad_ack``) and counted
  (``AcksRefused``); the members of the same ack that are known are still applied;
- acks count whatever the batch's publish state (a fast consumer may ack before the flusher
  marked the batch SENT): only the seal matters;
- the ack that completes a batch publishes its completion message once, inside its own
  transaction (the tracker locked), and stores it PUBLISHED with the acks; if that publish
  fails, :meth:`AckService.sweep` re-publishes it after the lease; if the process dies before
  the commit, nothing was stored and the re-delivered ack publishes again. Either way with the
  same ``completion_id`` and bytes (at least once across crashes).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from consolidator.batch import encode
from consolidator.clock import Clock
from consolidator.completion import Ack, AckFormatError, build_completion, parse_ack
from consolidator.errors import StoreError
from consolidator.services.ingest import MetricsRecorder, NoMetrics
from consolidator.sinks import OutgoingBatch, Sink
from consolidator.store.completion import AckResult, Tracker
from consolidator.store.mysql import MySQLStore

log = logging.getLogger(__name__)

BAD_ACK = "bad_ack"


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

    def ack(self, acks: Sequence[Ack]) -> list[AckResult]:
        """Apply ``acks`` (one transaction) and publish the completions they cause inside it.
        One result per ack, in order. Raises :class:`StoreUnavailable` when the database is down."""
        if not acks:
            return []
        try:
            results = self.store.apply_acks(acks, self.clock.now_ms(), self._publish_completions)
        except StoreError as error:
            if len(acks) == 1:
                raise
            log.warning("ack transaction failed; applying acks one by one", extra={"error": str(error)})
            results = [self._one(ack) for ack in acks]
        self._count(results)
        return results

    def _one(self, ack: Ack) -> AckResult:
        try:
            return self.store.apply_acks([ack], self.clock.now_ms(), self._publish_completions)[0]
        except StoreError as error:
            return AckResult(ack.batch_id, refused=[(None, f"store_error: {error}")])

    def _count(self, results: Sequence[AckResult]) -> None:
        """Metrics once per call (not per ack), a warning per refused ack, a line per completion."""
        self.metrics.add_metric(name="AcksApplied", unit="Count", value=sum(r.newly_acked for r in results))
        duplicates = sum(r.duplicates for r in results)
        if duplicates:
            self.metrics.add_metric(name="AcksDuplicate", unit="Count", value=duplicates)
        refused = [r for r in results if r.refused]
        if refused:
            self.metrics.add_metric(name="AcksRefused", unit="Count", value=sum(len(r.refused) for r in refused))
        for result in refused:
            log.warning("ack refused", extra={"batch_id": result.batch_id,
                                              "refused": [{"member": m, "reason": r} for m, r in result.refused]})
        completed = [r.completed.batch_id for r in results
                     if r.completed is not None and r.completed.outbox == "PUBLISHED"]
        for batch_id in completed:
            log.info("batch complete", extra={"batch_id": batch_id})
        if completed:
            self.metrics.add_metric(name="BatchesCompleted", unit="Count", value=len(completed))

    def handle_bodies(self, bodies: dict[str, str]) -> dict[str, str | None]:
        """Acks from message bodies keyed by message id -> ``{message id: refusal reason or None}``.
        A body that is not an ack is refused with ``bad_ack``; it never fails its neighbours."""
        outcome: dict[str, str | None] = {}
        parsed: list[tuple[str, Ack]] = []
        for message_id, body in bodies.items():
            try:
                parsed.append((message_id, parse_ack(body)))
            except AckFormatError as error:
                outcome[message_id] = f"{BAD_ACK}: {error}"
                self.metrics.add_metric(name="AcksRefused", unit="Count", value=1)
                log.warning("ack refused", extra={"message_id": message_id, "reason": BAD_ACK, "error": str(error)})
        results = self.ack([a for _, a in parsed])
        for (message_id, _), result in zip(parsed, results, strict=True):
            outcome[message_id] = None if result.ok else ", ".join(
                reason if member is None else f"{reason}: {member}" for member, reason in result.refused
            )
        return outcome

    def _publish_completions(self, trackers: Sequence[Tracker]) -> set[str]:
        """Publish completions; returns the batch ids the sink confirmed. A failure is counted
        and left PENDING for :meth:`sweep` (same completion id)."""
        messages = [build_completion(t.batch_id, t.group_key, t.member_count, t.sealed_at_ms, t.completed_at_ms)
                    for t in trackers]
        errors = self.completion_sink.publish([
            OutgoingBatch(m["completion_id"], m["group_key"], encode(m)) for m in messages
        ])
        for index, error in errors.items():
            self.metrics.add_metric(name="CompletionPublishFailures", unit="Count", value=1)
            log.warning("completion not published; re-published after the lease",
                        extra={"batch_id": trackers[index].batch_id, "error": error})
        return {t.batch_id for i, t in enumerate(trackers) if i not in errors}

    def _republish(self, trackers: Sequence[Tracker]) -> tuple[int, int]:
        """Publish leased completions and mark the confirmed ones. Returns (published, failed)."""
        if not trackers:
            return 0, 0
        confirmed = sorted(self._publish_completions(trackers))
        if confirmed:
            try:
                self.store.mark_completions_published(confirmed, self.clock.now_ms())
            except StoreError as error:  # the outbox stays PENDING: re-published (same id) later
                log.warning("completions published but not marked", extra={"batch_ids": confirmed,
                                                                           "error": str(error)})
            for batch_id in confirmed:
                log.info("batch complete", extra={"batch_id": batch_id})
            self.metrics.add_metric(name="BatchesCompleted", unit="Count", value=len(confirmed))
        return len(confirmed), len(trackers) - len(confirmed)

    def sweep(self, limit: int = 100) -> SweepReport:
        """Re-publish pending completions whose lease expired; measure overdue batches
        (``IncompleteBatches``, ``OldestIncompleteAge``). Run on a schedule."""
        now = self.clock.now_ms()
        report = SweepReport()
        leased = self.store.lease_completions(now, self.lease_ms, limit)
        report.republished, report.publish_failures = self._republish(leased)
        report.incomplete, oldest = self.store.incomplete_summary(now - self.deadline_ms)
        report.oldest_incomplete_age_ms = None if oldest is None else now - oldest
        self.metrics.add_metric(name="IncompleteBatches", unit="Count", value=report.incomplete)
        self.metrics.add_metric(name="OldestIncompleteAge", unit="Milliseconds",
                                value=report.oldest_incomplete_age_ms or 0)
        return report


def build_ack_service(settings, metrics: MetricsRecorder | None = None, clock: Clock | None = None) -> AckService:
    """Wire the service from :class:`~consolidator.settings.AckSettings`."""
    from consolidator.clock import SystemClock
    from consolidator.sinks import sink_from_url
    from consolidator.store import open_store

    return AckService(
        store=open_store(settings.database_url, settings.database_secret_arn),
        completion_sink=sink_from_url(settings.completion_sink_url),
        clock=clock or SystemClock(),
        metrics=metrics or NoMetrics(),
        deadline_ms=round(settings.completion_deadline_seconds * 1000),
        lease_ms=round(settings.completion_lease_seconds * 1000),
    )
