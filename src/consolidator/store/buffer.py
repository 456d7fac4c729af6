"""Ingest into the buffer (S1-S4) and the views of PENDING rows.

Guarantees:
- S1: a record at or below its partition's high-water mark changes nothing (store/offsets.py);
  the mark moves in the transaction that writes the rows;
- S2: a newer event (by source position) replaces a PENDING row's items; last-update moves
  forward, first-seen never moves;
- S3/S4: ``pending_slot`` is 1 only while a row is PENDING, so the unique key allows one
  PENDING row per (bucket, group, item) and any number of claimed ones (whatever their batch's state).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import orjson

from consolidator.rules.errors import StoreConflict, StoreLockWait
from consolidator.rules.events import Event, SourcePosition, bucket_of
from consolidator.rules.policy import GroupStats
from consolidator.store.connection import (
    Connection,
    Pipeline,
    _json_escaper,
    _multi_row,
    _string_escaper,
)
from consolidator.store.members import keys_table
from consolidator.store.offsets import (
    Partition,
    advance_marks,
    create_missing_marks,
    lock_read_statement,
    marks_of,
    record_applied,
)

CONFLICT_ATTEMPTS = 5  # an ingest rolled back by a deadlock runs again, at most this often
CONFLICT_BACKOFF_S = 0.02  # before attempt n+1, a random pause of up to n times this


@dataclass(frozen=True)
class IngestCounts:
    stored: int = 0  # records that changed the buffer (new rows + coalesced)
    coalesced: int = 0  # of those, records folded into an existing PENDING row
    replayed: int = 0  # records whose position was already stored: no-op


_UPSERT_HEAD = """
INSERT INTO buffer_rows
  (bucket, group_key, item_id, pos_key, src_topic, src_partition, src_offset, record_ts_ms,
   items, first_seen_ms, last_update_ms, trace_parent, trace_state)
VALUES """
_UPSERT_TAIL = """
ON DUPLICATE KEY UPDATE
  merged_events = merged_events + 1,
  items = IF(VALUES(pos_key) > pos_key, VALUES(items), items),
  record_ts_ms = IF(VALUES(pos_key) > pos_key, VALUES(record_ts_ms), record_ts_ms),
  src_topic = IF(VALUES(pos_key) > pos_key, VALUES(src_topic), src_topic),
  src_partition = IF(VALUES(pos_key) > pos_key, VALUES(src_partition), src_partition),
  src_offset = IF(VALUES(pos_key) > pos_key, VALUES(src_offset), src_offset),
  trace_parent = IF(VALUES(pos_key) > pos_key, VALUES(trace_parent), trace_parent),
  trace_state = IF(VALUES(pos_key) > pos_key, VALUES(trace_state), trace_state),
  last_update_ms = GREATEST(last_update_ms, VALUES(last_update_ms)),
  pos_key = GREATEST(pos_key, VALUES(pos_key))
"""
# ON DUPLICATE KEY UPDATE assigns left to right: pos_key is compared by every line above
# and changed last. merged_events always changes, so each duplicate counts 2 affected rows.


class BufferStore(Connection):
    def ingest(self, events: Sequence[Event], now_ms: int,
               settled: Sequence[SourcePosition] = ()) -> IngestCounts:
        """Store ``events`` in one transaction (S1-S4), all or nothing. An event at or below its
        partition's mark (or an earlier event of this call) is a replay. ``settled`` are
        positions handled elsewhere (poison confirmed in the dead letter): they only raise
        the marks. Callers pass each partition's records in offset order."""
        if not events and not settled:
            return IngestCounts()
        attempt = 1
        while True:
            try:
                return self._ingest_once(events, now_ms, settled)
            except StoreConflict as conflict:  # a deadlock with a concurrent claim: nothing was written
                if attempt == CONFLICT_ATTEMPTS or isinstance(conflict, StoreLockWait):
                    raise  # a lock wait already waited the server's whole timeout
                time.sleep(random.uniform(0, CONFLICT_BACKOFF_S * attempt))  # jittered: the claim it met moves on
                attempt += 1

    def _ingest_once(self, events: Sequence[Event], now_ms: int, settled: Sequence[SourcePosition]) -> IngestCounts:
        partitions = {(e.position.topic, e.position.partition) for e in events} | {(p.topic, p.partition) for p in settled}
        return self._store_chunks(partitions, [events], now_ms, settled)

    def ingest_pipelined(self, partitions: Iterable[Partition], chunks: Iterable[Sequence[Event]],
                         now_ms: int) -> IngestCounts:
        """What :meth:`ingest` does for the events of ``chunks`` (every one of a partition in
        ``partitions``; no settled positions), with ``chunks`` iterated while the server stores
        the previous chunk (the caller decodes there). All or nothing: any error, a statement's
        or one ``chunks`` raises, rolls everything back and propagates; no retry after a
        conflict (the caller falls back to :meth:`ingest`)."""
        return self._store_chunks(partitions, chunks, now_ms)

    def _store_chunks(self, partitions: Iterable[Partition], chunks: Iterable[Sequence[Event]], now_ms: int,
                      settled: Sequence[SourcePosition] = ()) -> IngestCounts:
        """One transaction: lock the marks of ``partitions``, upsert the fresh events of each
        chunk, then raise the marks past them and past ``settled``. One statement is in flight
        while the client reads the next chunk and builds the next statement."""
        keys = sorted(set(partitions))
        stored = seen = affected = 0
        with self.transaction() as cur, Pipeline(cur) as pipe:
            if keys:
                pipe.send(lock_read_statement(cur, keys))
            chunks = iter(chunks)
            chunk = next(chunks, None)  # the first decode overlaps the lock
            marks = create_missing_marks(cur, keys, marks_of(pipe.fetch())) if keys else {}
            high = {partition: mark.high_water for partition, mark in marks.items()}
            while chunk is not None:
                seen += len(chunk)
                fresh = _fresh(chunk, high)
                stored += len(fresh)
                for statement in _upsert_statements(cur, fresh, now_ms):
                    affected += pipe.wait()
                    pipe.send(statement)
                chunk = next(chunks, None)  # decoded while the server runs the last statement
            affected += pipe.wait()
            for topic, partition, offset in settled:  # after the events: they are not replays of these
                high[topic, partition] = max(high[topic, partition], offset)
            advance_marks(cur, {p: o for p, o in high.items() if o > marks[p].high_water})
        return IngestCounts(stored=stored, coalesced=affected - stored, replayed=seen - stored)

    def ingest_redriven(self, events: Sequence[Event], now_ms: int) -> IngestCounts:
        """Store fixed poison events under their original positions, each exactly once: the
        explicit per-position path (``applied_positions``), since their positions are at or
        below the marks. Never moves a mark. For ``dlq redrive`` only."""
        if not events:
            return IngestCounts()
        unique = list({e.position: e for e in events}.values())
        with self.transaction() as cur:
            new = record_applied(cur, [(e.position.sort_key(), e.bucket) for e in unique])
            fresh = [e for e, is_new in zip(unique, new, strict=True) if is_new]
            affected = sum(cur.execute(statement) for statement in _upsert_statements(cur, fresh, now_ms))
        return IngestCounts(stored=len(fresh), coalesced=affected - len(fresh), replayed=len(events) - len(fresh))

    def pending_group_stats(self, group_key: str | None = None) -> list[GroupStats]:
        """Statistics of PENDING rows per group (one group when ``group_key`` is given)."""
        where, args = ("AND group_key = %s", (group_key,)) if group_key is not None else ("", ())
        with self.transaction() as cur:
            cur.execute(
                "SELECT group_key, COUNT(*) AS pending, MIN(first_seen_ms) AS oldest,"
                " MAX(last_update_ms) AS newest, MIN(record_ts_ms) AS oldest_ts FROM buffer_rows"
                f" WHERE status = 'PENDING' {where} GROUP BY group_key ORDER BY group_key",
                args,
            )
            return [
                GroupStats(r["group_key"], int(r["pending"]), int(r["oldest"]), int(r["newest"]), int(r["oldest_ts"]))
                for r in cur.fetchall()
            ]

    def row_counts(self) -> dict[str, int]:
        """Rows per effective state: a CLAIMED row is in its batch's state (CLAIMED, SENT, DEAD).
        One statement (one snapshot): the rows per status, and the CLAIMED rows of the batches
        still CLAIMED or DEAD (few; found by primary key from the batch rows); the other CLAIMED
        rows are SENT."""
        member_of_live = "b.state IN ('CLAIMED', 'DEAD') AND r.status = 'CLAIMED'"
        with self.transaction() as cur:
            cur.execute(
                "SELECT 'row' AS part, status AS state, COUNT(*) AS n FROM buffer_rows GROUP BY status"
                f" UNION ALL SELECT 'batch', b.state, COUNT(*) FROM batches b JOIN {keys_table('b')}"
                f" STRAIGHT_JOIN buffer_rows r ON r.id = k.id AND r.bucket = k.bucket WHERE {member_of_live} GROUP BY b.state"
            )
            found = [(r["part"], r["state"], int(r["n"])) for r in cur.fetchall()]
        counts = {state: n for part, state, n in found if part == "row"}
        live = {}
        for part, state, n in found:
            if part == "batch":
                live[state] = live.get(state, 0) + n
        finished = counts.pop("CLAIMED", 0) - sum(live.values())
        counts["SENT"] = counts.get("SENT", 0) + finished
        counts["DEAD"] = counts.get("DEAD", 0) + live.get("DEAD", 0)
        counts["CLAIMED"] = live.get("CLAIMED", 0)
        return {state: n for state, n in sorted(counts.items()) if n}


def _fresh(events: Sequence[Event], high: dict[Partition, int]) -> list[Event]:
    """The events of ``events`` that are not replays (at or below ``high``, the marks as of the
    events before these), raising ``high`` past them."""
    fresh: list[Event] = []
    for e in events:
        topic, partition, offset = e.position
        if offset > high[topic, partition]:
            high[topic, partition] = offset
            fresh.append(e)
    return fresh


def _upsert_statements(cur, events: Sequence[Event], now_ms: int) -> Iterator[str]:
    """Multi-row upserts of ``events``, each built when asked for; each one's affected-rows count
    is 1 per new row and 2 per coalesced one. The row text is the ingest hot path: values are
    escaped inline, no wrapper per value, and what repeats (a partition's topic and the start of
    its position key, a group key) is escaped once per statement."""
    if not events:
        return
    esc = _string_escaper(cur.connection)
    esc_json = _json_escaper(cur.connection)
    dumps = orjson.dumps
    tail = f",{now_ms:d},{now_ms:d},NULL,NULL)"
    times = f",{now_ms:d},{now_ms:d},"
    groups: dict[str, str] = {}
    partitions: dict[Partition, tuple[str, str]] = {}

    def partition_text(topic: str, partition: int) -> tuple[str, str]:
        # the position key is sort_key(): topic, 0x00, partition (int32) then offset (int64), big-endian
        text = partitions[topic, partition] = (f"X'{topic.encode().hex()}00{partition.to_bytes(4, 'big', signed=True).hex()}",
                                               f"','{esc(topic)}',{partition:d},")
        return text

    def group_text(group: str) -> str:
        text = groups[group] = esc(group)
        return text

    def row(event: Event) -> str:
        (topic, partition, offset), ts, group, item, items, _, trace = event
        key, columns = partitions.get((topic, partition)) or partition_text(topic, partition)
        return (f"({bucket_of(ts)},'{groups[group] if group in groups else group_text(group)}','{esc(item)}',"
                f"{key}{offset.to_bytes(8, 'big', signed=True).hex()}{columns}{offset:d},{ts:d},"
                f"'{esc_json(dumps(items))}'{tail if trace is None else times + traced(trace)}")

    def traced(trace) -> str:
        # a TraceContext's traceparent is lowercase hex and dashes (rules/tracecontext.py): nothing
        # to escape; its tracestate is printable ASCII, which may hold a quote or a backslash
        parent, state = trace
        return f"'{parent}',{'NULL' if state is None else chr(39) + esc(state) + chr(39)})"

    yield from _multi_row(_UPSERT_HEAD, _UPSERT_TAIL, map(row, events))
