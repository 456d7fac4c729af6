"""A flush tick's failed attempts and dead batches: a batch whose publish the sink refused, whose
message could not be built or whose rows could not be read counts a failure; after
``max_attempts`` failures its dead-letter entry is written (its message as published when it can
be built, else its members' positions), and only once that is confirmed is it marked DEAD.

A mixin of :class:`~consolidator.services.flush.FlushService`, whose fields it reads.
"""

from __future__ import annotations

import logging

from consolidator.rules.batch import build_message
from consolidator.rules.deadletter import dead_batch_entry, unbuilt_batch_entry
from consolidator.rules.errors import StoreError
from consolidator.services.flush_publish import PendingPublish
from consolidator.services.flush_report import TickReport
from consolidator.store.mysql import ClaimedBatch

log = logging.getLogger("consolidator.services.flush")


class FailedBatches:
    """:meth:`_failed`, :meth:`_unbuilt` and :meth:`_unloadable` count a failed attempt;
    :meth:`_bury` and :meth:`_dead_letter_batch` dead-letter a batch out of attempts."""

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


    def _unbuilt(self, item: PendingPublish, error: Exception, report: TickReport) -> None:
        """The batch's message could not be built (an unexpected error): a failed attempt, as a
        publish the sink refused, counted also in ``BatchBuildFailures``."""
        report.build_failures += 1
        self.metrics.add_metric(name="BatchBuildFailures", unit="Count", value=1)
        log.error("message of batch %s not built", item.batch.batch_id, exc_info=error,
                  extra={"batch_id": item.batch.batch_id, "group_key": item.batch.group_key})
        self._failed(item, f"message not built: {type(error).__name__}: {error}", report)

    def _failed(self, item: PendingPublish, error: str, report: TickReport) -> None:
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
                                    shape=self.names.shape, event_times=self.names.event_times,
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
