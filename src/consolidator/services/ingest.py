"""Ingest use case: Kafka records -> durable buffer rows or dead-letter entries.

Guarantees:
- a record is reported as succeeded only once it is durable, as a buffer row (or a no-op
  replay of one) or as a confirmed dead-letter entry; everything else is returned as a
  failure, so Lambda re-delivers it and nothing is lost;
- each partition is applied as a contiguous prefix of what the invocation received: when a
  record cannot be stored (or dead-lettered), it and every later record of its partition are
  reported failed and not written; other partitions are unaffected (docs/semantics.md section 4);
- poison at or below its partition's high-water mark is a replay and is not dead-lettered
  again; the dead letter is still at-least-once (a poison record after a failure is reported
  failed even when its entry was written, and is dead-lettered again when re-delivered);
- an invocation whose records all decode is stored pipelined: one transaction in which the
  next chunk is decoded while the database stores the previous one, so the client's work and
  the server's overlap (``make bench-ingest BENCH_ARGS=--variants``: 1.26x-1.29x the records/s
  of the exact path, whose statements overlap only their own building, with the database on the
  same 2 cores; level when another process takes the second core; with the database on another
  host the round trips hide too). At the first poison
  record or statement error that transaction is rolled back and the exact path (decode
  everything, dead-letter the poison, store the rest in one transaction, isolate a failing
  record by halving) takes the invocation from the start, reusing what was decoded, so the
  response and the database end the same either way;
- no input raises: a malformed envelope is dead-lettered like a poison value (see
  :mod:`consolidator.sources.msk`). What raises is a dependency failure Lambda must see as an error: a
  piece of the event without a readable position whose dead-letter write failed, or a
  database that refuses the credentials.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain, islice, repeat

from consolidator.rules.clock import Clock
from consolidator.rules.deadletter import poison_entry, rejected_entry
from consolidator.rules.errors import DeliveryError, StoreConflict, StoreError, StoreUnavailable
from consolidator.rules.events import (
    READ,
    Event,
    FieldNames,
    KafkaRecord,
    PoisonEvent,
    Rejected,
    SourcePosition,
)
from consolidator.rules.tracecontext import TraceContext
from consolidator.services.metrics import MetricsRecorder, NoMetrics
from consolidator.services.spans import ingest_span, record_contexts
from consolidator.sinks.deadletter import DeadLetter
from consolidator.sources.formats import RegistryUnavailable, ValueDecoder, decode_event
from consolidator.sources.msk import batch_item_failures, parse_event
from consolidator.store.mysql import IngestCounts, MySQLStore
from consolidator.support import tracing
from consolidator.support.collector import collector_paused

log = logging.getLogger(__name__)

Partition = tuple[str, int]
_Poison = tuple[SourcePosition, dict, str, str]  # position, dead-letter entry, reason, detail
_NEVER = 2**63  # above every offset: the partition is not cut
PIPELINE_ROWS = 250  # records a pipelined chunk: small enough to overlap, large enough per statement


class _Undecodable(Exception):
    """A record of a pipelined chunk is poison or its schema cannot be read now (its outcome is
    kept for the exact path; raising a fresh exception leaves no reference cycle behind)."""


def _position(item: Event | SourcePosition) -> SourcePosition:
    return item.position if isinstance(item, Event) else item


def _by_partition(items: list[Event | SourcePosition]) -> list[list[Event | SourcePosition]]:
    """``items`` split by partition, each in its order."""
    partitions: dict[tuple[str, int], list] = {}
    for item in items:
        position = _position(item)
        partitions.setdefault((position.topic, position.partition), []).append(item)
    return list(partitions.values())


class PartitionCut:
    """Where each partition of one invocation stops being durable: its lowest offset that was not
    stored or dead-lettered. That record and every later one of its partition are reported failed
    and not written, so what is made durable of a partition is always a prefix of what arrived
    (docs/semantics.md section 4). A partition never cut keeps everything."""

    def __init__(self) -> None:
        self._at: dict[Partition, int] = {}

    def __bool__(self) -> bool:
        return bool(self._at)

    def at(self, position: SourcePosition) -> None:
        """``position`` and every later record of its partition are not made durable."""
        key = (position.topic, position.partition)
        self._at[key] = min(self._at.get(key, _NEVER), position.offset)

    def keeps(self, position: SourcePosition) -> bool:
        """Whether ``position`` is before its partition's cut (it may still be made durable)."""
        return position.offset < self._at.get((position.topic, position.partition), _NEVER)


@dataclass
class IngestOutcome:
    failed: list[SourcePosition] = field(default_factory=list)
    stored: int = 0
    coalesced: int = 0
    replayed: int = 0
    dead_lettered: int = 0
    # what was dead-lettered with a position this call: (position, reason, detail)
    poison: list[tuple[SourcePosition, str, str]] = field(default_factory=list)


@dataclass
class IngestService:
    store: MySQLStore
    dead_letter: DeadLetter
    names: FieldNames
    max_event_bytes: int
    clock: Clock
    metrics: MetricsRecorder = field(default_factory=NoMetrics)
    values: ValueDecoder | None = None  # the value format (consolidator.sources.formats); None: JSON
    pipeline_rows: int = PIPELINE_ROWS  # records per pipelined chunk; 0: always the exact path
    consumer_group: str | None = None  # the Kafka consumer group the records came through (a span attribute)

    def decode(self, record: KafkaRecord) -> Event:
        """``record``'s event; :class:`PoisonEvent` for bad input, :class:`RegistryUnavailable`
        when the value's schema cannot be looked up now (a dependency failure, never poison)."""
        return decode_event(self.values, record, self.names, self.max_event_bytes)

    def handle_msk_event(self, event: object) -> dict:
        """The whole Lambda contract: MSK event in, partial batch response out. No input makes
        this raise; see :meth:`ingest` for the one dependency failure that does."""
        with collector_paused():  # the records and their parsed events: trees, no cycles (consolidator/support/collector.py)
            parsed = parse_event(event)
            return batch_item_failures(self.ingest(parsed.records, parsed.rejected).failed)

    def ingest(self, records: Sequence[KafkaRecord], rejected: Sequence[Rejected] = ()) -> IngestOutcome:
        """Store or dead-letter ``records`` and dead-letter the ``rejected`` pieces of their event.

        Raises :class:`DeliveryError` only when a piece without a readable position could not be
        dead-lettered: Lambda cannot be told about it, so the whole invocation fails and is
        retried (nothing has been stored by then). While tracing is on the call is one span
        (:func:`~consolidator.services.spans.ingest_span`). The cyclic garbage collector is paused
        over the call (:mod:`consolidator.support.collector`)."""
        if tracing.tracer() is None:
            with collector_paused():
                return self._ingest(records, rejected)
        with collector_paused():
            contexts = record_contexts(records)  # read once: the span's parent and links, each event's trace
            with ingest_span(records, contexts, self.consumer_group) as span:
                outcome = self._ingest(records, rejected, contexts)
                span.set_attributes({"consolidator.ingest.stored": outcome.stored,
                                     "consolidator.ingest.dead_lettered": outcome.dead_lettered,
                                     "consolidator.ingest.failed": len(outcome.failed)})
                return outcome

    def _ingest(self, records: Sequence[KafkaRecord], rejected: Sequence[Rejected],
                contexts: Sequence[TraceContext | None] | None = None) -> IngestOutcome:
        outcome = IngestOutcome()
        cut = PartitionCut()
        if self.values is not None:
            self.values.begin_invocation()
        self._decode_and_store(records, rejected, outcome, cut, contexts)
        if cut:
            positions = [*(r.position for r in records), *(r.position for r in rejected if r.position is not None)]
            outcome.failed = list(dict.fromkeys(
                p for p in positions if not cut.keeps(p)))
        for name, value in (
            ("RecordsIngested", outcome.stored),
            ("RecordsCoalesced", outcome.coalesced),
            ("RecordsReplayed", outcome.replayed),
            ("RecordsDeadLettered", outcome.dead_lettered),
            ("RecordsFailed", len(outcome.failed)),
        ):
            self.metrics.add_metric(name=name, unit="Count", value=value)
        return outcome

    def _decoded(self, record: KafkaRecord, trace) -> Event | PoisonEvent | RegistryUnavailable:
        """``record``'s event, or the poison or registry failure its decode raised."""
        try:
            return decode_event(self.values, record, self.names, self.max_event_bytes, trace)
        except (PoisonEvent, RegistryUnavailable) as error:
            return error

    def _decode_and_store(self, records: Sequence[KafkaRecord], rejected: Sequence[Rejected],
                          outcome: IngestOutcome, cut: PartitionCut,
                          contexts: Sequence[TraceContext | None] | None) -> None:
        """The pipelined store when nothing was rejected; else, or when it gives up, the exact
        path: decode everything, dead-letter the poison, then store the rest (:meth:`_store`).
        ``contexts``: the records' trace contexts when read already (tracing on), else None (each
        decode reads its record's)."""
        traces = repeat(READ) if contexts is None else contexts
        decoded: list[Event | PoisonEvent | RegistryUnavailable] = []  # the first records' outcomes
        conflicted = False  # the pipelined transaction met a lock wait or deadlock
        if not rejected and records and self.pipeline_rows:
            try:
                if self._store_pipelined(records, traces, decoded, outcome, cut):
                    return
            except StoreConflict:
                conflicted = True
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
        poison: list[_Poison] = [
            (r.position, rejected_entry(r, now), str(r.reason), r.detail) for r in rejected if r.position is not None
        ]
        done = len(decoded)
        outcomes = chain(decoded, map(self._decoded, records[done:], islice(traces, done, None)))
        for record, event in zip(records, outcomes):
            if type(event) is Event:
                events.append(event)
            elif isinstance(event, PoisonEvent):
                poison.append((record.position, poison_entry(record, event, now), str(event.reason), event.detail))
            else:
                log.error("schema registry unavailable; the record and the later records of its partition"
                          " will be retried", extra={"source": record.position.as_dict(), "error": str(event)})
                cut.at(record.position)
        if cut:  # what follows a record the registry could not decode waits for it, poison included
            poison = [p for p in poison if cut.keeps(p[0])]
        positions = [*(r.position for r in records), *(p for p, *_ in poison)]
        try:
            settled = self._dead_letter(poison, outcome, cut)
        except StoreUnavailable as error:
            log.error("database unavailable; failing every record", extra={"error": str(error)})
            for position in positions:
                cut.at(position)
        else:
            self._store([*events, *settled], outcome, cut, by_partition=conflicted)

    def _store_pipelined(self, records: Sequence[KafkaRecord], traces: Iterable, decoded: list,
                         outcome: IngestOutcome, cut: PartitionCut) -> bool:
        """The usual invocation, every record valid: one transaction in which the records are
        decoded chunk by chunk while the database stores the previous chunk. Each record's
        outcome is appended to ``decoded``. Returns False, with nothing written, at the first
        poison record, registry failure or statement error: the exact path then takes the
        invocation from the start (dead letter, isolating a failing record), so the outcome is
        the exact path's. Raises :class:`StoreConflict`, with nothing written, after a lock wait
        or deadlock."""
        size = self.pipeline_rows

        def chunks() -> Iterator[list[Event]]:
            chunk: list[Event] = []
            for record, trace in zip(records, traces):
                event = self._decoded(record, trace)
                decoded.append(event)
                if type(event) is not Event:
                    raise _Undecodable  # rolls the transaction back
                chunk.append(event)
                if len(chunk) == size:
                    yield chunk
                    chunk = []
            if chunk:
                yield chunk

        try:
            counts = self.store.ingest_pipelined({(r.topic, r.partition) for r in records}, chunks(),
                                                 self.clock.now_ms())
        except StoreConflict:
            raise
        except (_Undecodable, StoreError):
            return False
        except StoreUnavailable as error:
            log.error("database unavailable; failing every record", extra={"error": str(error)})
            for record in records:
                cut.at(record.position)
            return True
        self._count(counts, outcome)
        return True

    def redrive(self, records: Sequence[KafkaRecord]) -> IngestOutcome:
        """Re-ingest fixed poison under its original positions, each exactly once (the store's
        explicit per-position path; the marks already cover these positions). A record that is
        still poison is reported failed."""
        outcome = IngestOutcome()
        if self.values is not None:
            self.values.begin_invocation()
        events = []
        for record in records:
            try:
                events.append(self.decode(record))
            except (PoisonEvent, RegistryUnavailable):
                outcome.failed.append(record.position)
        chunks = [events] if events else []
        while chunks:
            chunk = chunks.pop()
            try:
                self._count(self.store.ingest_redriven(chunk, self.clock.now_ms()), outcome)
            except StoreUnavailable as error:
                log.error("database unavailable during redrive", extra={"error": str(error)})
                outcome.failed += [e.position for c in [chunk, *chunks] for e in c]
                break
            except StoreError as error:
                if len(chunk) == 1:
                    log.error("redriven record could not be stored",
                              extra={"source": chunk[0].position.as_dict(), "error": str(error)})
                    outcome.failed.append(chunk[0].position)
                else:
                    chunks += [[e] for e in reversed(chunk)]
        return outcome

    def _dead_letter(self, poison: list[_Poison], outcome: IngestOutcome,
                     cut: PartitionCut) -> list[SourcePosition]:
        """Dead-letter the poison that is not a replay (the marks, read without a lock, tell);
        returns the positions whose entry is confirmed and cuts the partitions of the others."""
        if not poison:
            return []
        marks = self.store.replay_marks({(p.topic, p.partition) for p, *_ in poison})
        fresh = []
        for item in poison:
            position = item[0]
            mark = marks.get((position.topic, position.partition))
            if mark is not None and mark.is_replay(position.offset):
                outcome.replayed += 1
            else:
                fresh.append(item)
        if not fresh:
            return []
        failed = self.dead_letter.send([entry for _, entry, _, _ in fresh])
        settled = []
        for index, (position, entry, reason, _) in enumerate(fresh):
            detail = entry.get("detail")  # bounded in the entry: a log line never quotes a 120 KB value
            if index in failed:
                log.error("dead-letter write failed; record will be retried",
                          extra={"source": position.as_dict(), "reason": reason})
                cut.at(position)
            else:
                log.warning("poison record dead-lettered",
                            extra={"source": position.as_dict(), "reason": reason, "detail": detail})
                outcome.dead_lettered += 1
                outcome.poison.append((position, reason, detail))
                settled.append(position)
        return settled

    def _store(self, items: list[Event | SourcePosition], outcome: IngestOutcome, cut: PartitionCut, *,
               by_partition: bool = False) -> None:
        """One transaction for the whole invocation; if it fails on a statement error, halve
        until the failing record is isolated, which cuts its partition there. Earlier halves go
        first, so what is stored of a partition is always a prefix. An unreachable database
        cuts every partition at its first record not stored yet. A lock wait or deadlock is no
        record's fault (halving would wait again for each half): the partitions are stored one
        by one (from the start with ``by_partition``: the pipelined transaction met one), and
        one that conflicts alone is cut at its first record."""
        chunks = (_by_partition(items) if by_partition else [items]) if items else []
        while chunks:
            chunk = chunks.pop()
            if cut:
                chunk = [i for i in chunk if cut.keeps(_position(i))]
                if not chunk:
                    continue
            events = [i for i in chunk if type(i) is Event]
            settled = [i for i in chunk if type(i) is not Event] if len(events) < len(chunk) else []
            try:
                counts = self.store.ingest(events, self.clock.now_ms(), settled)
            except StoreUnavailable as error:
                log.error("database unavailable; failing the records not stored yet",
                          extra={"error": str(error)})
                for item in (i for c in [chunk, *chunks] for i in c):
                    cut.at(_position(item))
                return
            except StoreConflict as error:
                partitions = _by_partition(chunk)
                if len(partitions) > 1:
                    chunks += partitions
                else:
                    log.error("database conflict on a partition (a lock wait or a deadlock); its records"
                              " not stored yet will be retried",
                              extra={"source": _position(chunk[0]).as_dict(), "error": str(error)})
                    cut.at(_position(chunk[0]))
                continue
            except StoreError as error:
                if len(chunk) == 1:
                    log.error("record could not be stored; it and the later records of its partition"
                              " will be retried", extra={"source": _position(chunk[0]).as_dict(), "error": str(error)})
                    cut.at(_position(chunk[0]))
                else:
                    middle = len(chunk) // 2
                    chunks += [chunk[middle:], chunk[:middle]]
                continue
            self._count(counts, outcome)

    @staticmethod
    def _count(counts: IngestCounts, outcome: IngestOutcome) -> None:
        outcome.stored += counts.stored
        outcome.coalesced += counts.coalesced
        outcome.replayed += counts.replayed


def build_ingest_service(settings, metrics: MetricsRecorder | None = None, clock: Clock | None = None) -> IngestService:
    """Wire the service from :class:`~consolidator.settings.IngestSettings`."""
    from consolidator.rules.clock import SystemClock
    from consolidator.sinks.deadletter import dead_letter_from_url
    from consolidator.store import open_store

    return IngestService(
        store=open_store(settings.database_url, settings.database_secret_arn),
        dead_letter=dead_letter_from_url(settings.dead_letter_url),
        names=settings.field_names(),
        max_event_bytes=settings.max_event_bytes,
        clock=clock or SystemClock(),
        metrics=metrics or NoMetrics(),
        values=settings.value_decoder(),
        # the worker's own group; the function's is its event source mapping's, as the stack sets it
        consumer_group=getattr(settings, "kafka_group_id", None) or getattr(settings, "consumer_group", None),
    )
