"""Event time-to-live in the flush: rows over the TTL -> dead-letter destination -> EXPIRED.

Guarantees (docs/semantics.md section 7): expiry is never silent and never loses a row before the
dead-letter write is confirmed. Expired rows are claimed under an expiry record (CLAIMED), one
dead-letter entry per row (reason ``expired``) is written, and each confirmed entry moves its own
row to EXPIRED (the record follows when its last row does). A refused entry leaves its row
CLAIMED, and only it; the flush's re-publish step settles it on a later tick, so an entry can
reach the dead-letter destination twice, never zero times.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from consolidator.rules.clock import Clock
from consolidator.rules.deadletter import expired_entry
from consolidator.rules.errors import DuplicateBatchId, StoreError
from consolidator.services.flush_report import duplicate_batch_id
from consolidator.services.metrics import MetricsRecorder
from consolidator.sinks.deadletter import DeadLetter
from consolidator.store.mysql import ExpiryBatch, MySQLStore

log = logging.getLogger("consolidator.services.flush")


@dataclass
class Expiry:
    store: MySQLStore
    dead_letter: DeadLetter
    clock: Clock
    metrics: MetricsRecorder
    chunk: int  # rows per expiry record (``max_batch_size``)
    epochs: Mapping[str, int] = field(default_factory=dict)  # the topics' epochs the record ids name (read once per tick)

    def expire_group(self, group_key: str, cutoff_ms: int, now: int) -> tuple[int, int]:
        """Claim the group's PENDING rows whose record timestamp is before ``cutoff_ms``, in chunks,
        and settle each chunk. Returns (rows claimed for expiry, rows now EXPIRED)."""
        claimed = expired = 0
        while True:
            try:
                expiry = self.store.claim_expired(group_key, cutoff_ms, self.chunk, now, self.epochs)
            except DuplicateBatchId as error:
                duplicate_batch_id(self.metrics, error)
                return claimed, expired
            except StoreError as error:
                log.warning("expiry skipped this tick", extra={"group_key": group_key, "error": str(error)})
                return claimed, expired
            if expiry is None:
                return claimed, expired
            claimed += len(expiry.members)
            expired += self.settle(expiry)
            if len(expiry.members) < self.chunk:
                return claimed, expired

    def settle(self, expiry: ExpiryBatch) -> int:
        """Dead-letter the CLAIMED rows of an expiry record, then mark each confirmed one EXPIRED
        on its own: an entry the destination refused stays CLAIMED (retried on a later tick)
        and never holds back its neighbours. Returns the rows marked."""
        now = self.clock.now_ms()
        entries = [expired_entry(expiry.group_key, m, expiry.claimed_at_ms, now) for m in expiry.members]
        failed = self.dead_letter.send(entries)
        if failed:
            log.error("dead-letter write of expired rows failed; those rows stay CLAIMED and are retried next tick",
                      extra={"batch_id": expiry.batch_id, "group_key": expiry.group_key,
                             "rows": len(failed), "of": len(expiry.members)})
        confirmed = [m.position for i, m in enumerate(expiry.members) if i not in failed]
        if not confirmed:
            return 0
        try:
            marked = self.store.mark_expired(expiry.batch_id, now, confirmed)
        except StoreError as error:
            log.error("dead-lettered expired rows not marked EXPIRED; retried next tick (duplicate entries possible)",
                      extra={"batch_id": expiry.batch_id, "error": str(error)})
            return 0
        if not marked:
            return 0
        self.metrics.add_metric(name="EventsExpired", unit="Count", value=marked)
        log.warning("rows over the event TTL sent to the dead-letter destination",
                    extra={"batch_id": expiry.batch_id, "group_key": expiry.group_key, "rows": marked})
        return marked
