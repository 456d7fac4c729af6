"""Ingest use case: Kafka records -> durable buffer rows or dead-letter entries.

Guarantee: a record is reported as succeeded only once it is durable, as a buffer row (or a
no-op replay of one) or as a confirmed dead-letter entry. Everything else is returned as a
failure, so Lambda re-delivers it and nothing is lost. No input raises: a malformed envelope
is dead-lettered like a poison value (see :mod:`consolidator.msk`). What raises is a
dependency failure Lambda must see as an error: a piece of the event without a readable
position whose dead-letter write failed, or a database that refuses the credentials.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from consolidator.clock import Clock
from consolidator.deadletter import DeadLetter, poison_entry, rejected_entry
from consolidator.errors import DeliveryError, StoreError, StoreUnavailable
from consolidator.events import Event, FieldNames, KafkaRecord, PoisonEvent, SourcePosition, decode
from consolidator.msk import Rejected, batch_item_failures, parse_event
from consolidator.store.mysql import IngestCounts, MySQLStore

log = logging.getLogger(__name__)


class MetricsRecorder(Protocol):
    """What Powertools' ``Metrics`` offers; services depend on this, not on Powertools."""

    def add_metric(self, name: str, unit: str, value: float) -> None: ...


class NoMetrics:
    def add_metric(self, name: str, unit: str, value: float) -> None:
        pass


@dataclass
class IngestOutcome:
    failed: list[SourcePosition] = field(default_factory=list)
    stored: int = 0
    coalesced: int = 0
    replayed: int = 0
    dead_lettered: int = 0


@dataclass
class IngestService:
    store: MySQLStore
    dead_letter: DeadLetter
    names: FieldNames
    max_event_bytes: int
    clock: Clock
    metrics: MetricsRecorder = field(default_factory=NoMetrics)

    def handle_msk_event(self, event: object) -> dict:
        """The whole Lambda contract: MSK event in, partial batch response out. No input makes
        this raise; see :meth:`ingest` for the one dependency failure that does."""
        parsed = parse_event(event)
        return batch_item_failures(self.ingest(parsed.records, parsed.rejected).failed)

    def ingest(self, records: Sequence[KafkaRecord], rejected: Sequence[Rejected] = ()) -> IngestOutcome:
        """Store or dead-letter ``records`` and dead-letter the ``rejected`` pieces of their event.

        Raises :class:`DeliveryError` only when a piece without a readable position could not be
        dead-lettered: Lambda cannot be told about it, so the whole invocation fails and is
        retried (nothing has been stored by then)."""
        outcome = IngestOutcome()
        now = self.clock.now_ms()
        unidentified = [r for r in rejected if r.position is None]
        if unidentified:
            if self.dead_letter.send([rejected_entry(r, now) for r in unidentified]):
                raise DeliveryError(f"dead-letter write failed for {len(unidentified)} unidentifiable "
                                    "piece(s) of the event; the invocation fails so Lambda retries it")
            for r in unidentified:
                log.warning("unidentifiable piece of the event dead-lettered",
                            extra={"reason": str(r.reason), "detail": r.detail, "partition_key": r.partition_key})
            outcome.dead_lettered += len(unidentified)
        events: list[Event] = []
        poison: list[tuple[SourcePosition, dict, str, str]] = [
            (r.position, rejected_entry(r, now), str(r.reason), r.detail) for r in rejected if r.position is not None
        ]
        for record in records:
            try:
                events.append(decode(record, self.names, self.max_event_bytes))
            except PoisonEvent as error:
                poison.append((record.position, poison_entry(record, error, now), str(error.reason), error.detail))
        self._dead_letter(poison, outcome)
        self._store(events, outcome)
        for name, value in (
            ("RecordsIngested", outcome.stored),
            ("RecordsCoalesced", outcome.coalesced),
            ("RecordsReplayed", outcome.replayed),
            ("RecordsDeadLettered", outcome.dead_lettered),
            ("RecordsFailed", len(outcome.failed)),
        ):
            self.metrics.add_metric(name=name, unit="Count", value=value)
        return outcome

    def _dead_letter(self, poison: list[tuple[SourcePosition, dict, str, str]], outcome: IngestOutcome) -> None:
        if not poison:
            return
        failed = self.dead_letter.send([entry for _, entry, _, _ in poison])
        for index, (position, _, reason, detail) in enumerate(poison):
            if index in failed:
                log.error("dead-letter write failed; record will be retried",
                          extra={"source": position.as_dict(), "reason": reason})
                outcome.failed.append(position)
            else:
                log.warning("poison record dead-lettered",
                            extra={"source": position.as_dict(), "reason": reason, "detail": detail})
                outcome.dead_lettered += 1

    def _store(self, events: list[Event], outcome: IngestOutcome) -> None:
        """One multi-row upsert; if it fails on a statement error, halve until the failing
        records are isolated. An unreachable database fails every record not yet stored."""
        pending = [events] if events else []
        while pending:
            chunk = pending.pop()
            try:
                counts = self.store.ingest(chunk, self.clock.now_ms())
            except StoreUnavailable as error:
                log.error("database unavailable; failing %d records", sum(map(len, pending)) + len(chunk),
                          extra={"error": str(error)})
                outcome.failed.extend(e.position for c in [chunk, *pending] for e in c)
                return
            except StoreError as error:
                if len(chunk) == 1:
                    log.error("record could not be stored; it will be retried",
                              extra={"source": chunk[0].position.as_dict(), "error": str(error)})
                    outcome.failed.append(chunk[0].position)
                else:
                    middle = len(chunk) // 2
                    pending.extend((chunk[middle:], chunk[:middle]))
                continue
            self._count(counts, outcome)

    @staticmethod
    def _count(counts: IngestCounts, outcome: IngestOutcome) -> None:
        outcome.stored += counts.stored
        outcome.coalesced += counts.coalesced
        outcome.replayed += counts.replayed


def build_ingest_service(settings, metrics: MetricsRecorder | None = None, clock: Clock | None = None) -> IngestService:
    """Wire the service from :class:`~consolidator.settings.IngestSettings`."""
    from consolidator.clock import SystemClock
    from consolidator.deadletter import dead_letter_from_url
    from consolidator.store import open_store

    return IngestService(
        store=open_store(settings.database_url, settings.database_secret_arn),
        dead_letter=dead_letter_from_url(settings.dead_letter_url),
        names=settings.field_names(),
        max_event_bytes=settings.max_event_bytes,
        clock=clock or SystemClock(),
        metrics=metrics or NoMetrics(),
    )
