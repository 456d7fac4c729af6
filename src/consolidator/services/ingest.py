"""Ingest use case: Kafka records -> durable buffer rows or dead-letter entries.

Guarantee: a record is reported as succeeded only once it is durable, as a buffer row (or a
no-op replay of one) or as a confirmed dead-letter entry. Everything else is returned as a
failure, so Lambda re-delivers it and nothing is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from consolidator.clock import Clock
from consolidator.deadletter import DeadLetter, poison_entry
from consolidator.errors import StoreError, StoreUnavailable
from consolidator.events import Event, FieldNames, KafkaRecord, PoisonEvent, SourcePosition, decode
from consolidator.msk import batch_item_failures, records_from_event
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

    def handle_msk_event(self, event: dict) -> dict:
        """The whole Lambda contract: MSK event in, partial batch response out."""
        return batch_item_failures(self.ingest(records_from_event(event)).failed)

    def ingest(self, records: Sequence[KafkaRecord]) -> IngestOutcome:
        outcome = IngestOutcome()
        events: list[Event] = []
        poison: list[tuple[KafkaRecord, PoisonEvent]] = []
        for record in records:
            try:
                events.append(decode(record, self.names, self.max_event_bytes))
            except PoisonEvent as error:
                poison.append((record, error))
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

    def _dead_letter(self, poison: list[tuple[KafkaRecord, PoisonEvent]], outcome: IngestOutcome) -> None:
        if not poison:
            return
        now = self.clock.now_ms()
        failed = self.dead_letter.send([poison_entry(record, error, now) for record, error in poison])
        for index, (record, error) in enumerate(poison):
            if index in failed:
                log.error("dead-letter write failed; record will be retried",
                          extra={"source": record.position.as_dict(), "reason": str(error.reason)})
                outcome.failed.append(record.position)
            else:
                log.warning("poison record dead-lettered",
                            extra={"source": record.position.as_dict(), "reason": str(error.reason),
                                   "detail": error.detail})
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
