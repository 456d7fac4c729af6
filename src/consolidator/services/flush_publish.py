"""Delivery of a flush tick's claimed batches: build each message (its members' trace contexts
included), seal it when completion tracking is on, publish a chunk to the sink under a span per
batch, then mark the confirmed batches SENT in one conditional statement. A batch the sink
refused, or whose message could not be built, goes to
:class:`~consolidator.services.flush_failures.FailedBatches` (a failed attempt, then dead).

A mixin of :class:`~consolidator.services.flush.FlushService`, whose fields it reads.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from consolidator.rules.batch import build_message, encode
from consolidator.rules.errors import StoreError
from consolidator.rules.tracecontext import TraceContext
from consolidator.services.flush_report import REASON_METRICS, PublishedBatch, TickReport
from consolidator.services.spans import end_publish_span, start_publish_span
from consolidator.sinks import OutgoingBatch
from consolidator.store.completion import SealedBatch
from consolidator.store.mysql import ClaimedBatch
from consolidator.support import tracing

log = logging.getLogger("consolidator.services.flush")


@dataclass
class PendingPublish:
    """A batch about to be published: the claim and its attempt number (failed publishes + 1)."""

    batch: ClaimedBatch
    attempt: int
    body: bytes
    seal: SealedBatch | None = None  # completion tracking on: what the seal records
    contexts: tuple[TraceContext, ...] = ()  # the members' trace contexts, batch order
    traceparent: str | None = None  # the message's own (a member had a trace context)


class Publishing:
    """:meth:`_deliver` and its steps (the publish spans, the ack key, the seal)."""

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
        pending: list[PendingPublish] = []
        for batch in batches:
            if batch.batch_id not in failed_before:
                log.info("batch no longer CLAIMED; not publishing", extra={"batch_id": batch.batch_id})
                continue
            attempt = failed_before[batch.batch_id] + 1
            traces = batch.trace_contexts  # read with its members, at the claim or at the reload
            try:
                message = build_message(batch.group_key, batch.members, batch.reason, batch.claimed_at_ms,
                                        ack_key=ack_key, held_back_ms=batch.held_back_ms, assigned_id=batch.batch_id,
                                        shape=self.names.shape, event_times=self.names.event_times,
                                        trace_contexts=traces)
                body = encode(message)
                seal = SealedBatch.of_message(message) if self.completion_tracking else None
            except Exception as error:  # noqa: BLE001 - this batch only: a failed attempt, retried, then dead
                self._unbuilt(PendingPublish(batch, attempt, b""), error, report)
                continue
            pending.append(PendingPublish(batch, attempt, body, seal, traces, message.get("traceparent")))
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

    def _publish_spans(self, pending: list[PendingPublish]) -> list | None:
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

    def _seal(self, pending: list[PendingPublish]) -> bool:
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
