"""A shard's PENDING rows as columns: the streaming job's state under a plain policy.

Under a policy without rate limit, TTL or byte cap (:func:`~consolidator.spark.columnar.is_plain`)
a group's rows need no per-group state besides themselves, so a shard keeps all its groups' rows
in one Arrow table (one row per group, month bucket and item id) and applies a micro-batch's
events to it with array operations, not one Python call per event. Only groups that are due
become :class:`~consolidator.rules.batch.Member` rows, for :func:`~consolidator.rules.policy.plan_group`.

Guarantee: the same rows, claims and due times as one :class:`~consolidator.rules.buffer.PendingBuffer`
per group fed the same events at the same times (``tests/unit/test_pending_table.py``):
- a position seen twice in one call counts once (Spark's checkpoint feeds each offset once
  across micro-batches);
- per row, the newest position wins (with its items and record timestamp), ``merged_events``
  adds up, ``last_update`` is the latest ingest time and ``first_seen`` never moves.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from consolidator.rules.batch import Member
from consolidator.rules.buffer import RowKey, claim_split
from consolidator.rules.events import SourcePosition, bucket_of
from consolidator.rules.policy import GroupPlan, Policy, due_at_ms, is_due, plan_group
from consolidator.rules.shape import REFERENCE_SHAPE, EventView, Shape, stored_text
from consolidator.spark.columnar import parse_items

SCHEMA = pa.schema([
    ("group_key", pa.string()), ("bucket", pa.int64()), ("item_id", pa.string()), ("topic", pa.string()),
    ("partition", pa.int64()), ("offset", pa.int64()), ("items", pa.string()),  # JSON [[sku, quantity], ...]
    ("first_seen_ms", pa.int64()), ("last_update_ms", pa.int64()), ("merged_events", pa.int64()),
    ("record_ts_ms", pa.int64()),
])
#: The events :meth:`PendingTable.ingest` takes (the decoded records' columns).
EVENT_SCHEMA = pa.schema([("group_key", pa.string()), ("topic", pa.string()), ("partition", pa.int64()),
                          ("offset", pa.int64()), ("timestamp_ms", pa.int64()), ("item_id", pa.string()),
                          ("items", pa.string())])


def _buckets(ts: np.ndarray) -> np.ndarray:
    """:func:`bucket_of` of each timestamp, computed once per distinct day."""
    days, inverse = np.unique(ts // 86_400_000, return_inverse=True)
    return np.array([bucket_of(int(day) * 86_400_000) for day in days], dtype=np.int64)[inverse.reshape(-1)]


ROW_KEY = ("group_key", "bucket", "item_id")
POSITION = ("topic", "partition", "offset")


def _changes(table: pa.Table, names: tuple[str, ...]) -> np.ndarray:
    """For sorted rows: True where ``names`` differ from the row before (and for the first row)."""
    changed = np.zeros(table.num_rows, dtype=bool)
    changed[0:1] = True
    for name in names:
        column = table.column(name)
        changed[1:] |= pc.not_equal(column[1:], column[:-1]).to_numpy(zero_copy_only=False)
    return changed


def _column(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy().astype(np.int64, copy=False)


def _members(table: pa.Table) -> Iterator[tuple[str, RowKey, Member]]:
    """The rows of ``table`` (:data:`SCHEMA`) as (group key, (bucket, item id), member)."""
    for group, bucket, item, t, p, o, items, fs, lu, merged, ts in zip(
            *(table.column(name).to_pylist() for name in SCHEMA.names), strict=True):
        yield group, (bucket, item), Member(SourcePosition(t, p, o), item, parse_items(items), fs, lu, merged, ts)


class PendingTable:
    """PENDING rows of the groups of one shard, sorted by (group, bucket, item id)."""

    def __init__(self, table: pa.Table | None = None) -> None:
        self.table = SCHEMA.empty_table() if table is None else table

    @classmethod
    def load(cls, blob: bytes | None) -> PendingTable:
        return cls(None if blob is None else pa.ipc.open_stream(blob).read_all())

    def dump(self) -> bytes | None:
        """The state value (None: no rows, clear the state)."""
        if self.table.num_rows == 0:
            return None
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, SCHEMA, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
            writer.write_table(self.table)
        return sink.getvalue().to_pybytes()

    def __len__(self) -> int:
        return self.table.num_rows

    # -- ingest ------------------------------------------------------------------------------

    def ingest(self, events: pa.Table, now_ms: int) -> None:
        """Apply ``events`` (the columns of :data:`EVENT_SCHEMA`, integers of any width; others
        ignored; any order) at ``now_ms``."""
        if events.num_rows == 0:
            return
        events = events.take(pc.sort_indices(events, [(name, "ascending") for name in POSITION]))
        events = events.filter(pa.array(_changes(events, POSITION)))  # a position seen twice counts once
        ts = _column(events, "timestamp_ms")
        count = events.num_rows
        now = np.full(count, now_ms, dtype=np.int64)
        new = pa.table({
            "group_key": events.column("group_key"), "bucket": _buckets(ts), "item_id": events.column("item_id"),
            "topic": events.column("topic"), "partition": _column(events, "partition"),
            "offset": _column(events, "offset"), "items": events.column("items"), "first_seen_ms": now,
            "last_update_ms": now, "merged_events": np.ones(count, dtype=np.int64), "record_ts_ms": ts,
        }, schema=SCHEMA)
        self.table = self._merge(pa.concat_tables([self.table, new]), stored=len(self))

    @staticmethod
    def _merge(rows: pa.Table, stored: int) -> pa.Table:
        """One row per (group, bucket, item id), sorted by it: the first ``stored`` rows are the
        state (unique keys), the rest new single-event rows. Strings sort by their UTF-8 bytes,
        i.e. by code point, as Python compares them."""
        order = pc.sort_indices(rows, [(name, "ascending") for name in (*ROW_KEY, *POSITION)]).to_numpy()
        starts = np.flatnonzero(_changes(rows.take(pa.array(order)), ROW_KEY))
        newest = order[np.r_[starts[1:], len(order)] - 1]  # the greatest position of each key
        is_stored = order < stored
        first_seen = _column(rows, "first_seen_ms")
        stored_first = np.maximum.reduceat(np.where(is_stored, first_seen[order], np.iinfo(np.int64).min), starts)
        merged = rows.take(pa.array(newest))
        return (merged
                .set_column(7, "first_seen_ms", pa.array(np.where(np.maximum.reduceat(is_stored, starts),
                                                                  stored_first, first_seen[newest])))
                .set_column(8, "last_update_ms", pa.array(np.maximum.reduceat(
                    _column(rows, "last_update_ms")[order], starts)))
                .set_column(9, "merged_events", pa.array(np.add.reduceat(
                    _column(rows, "merged_events")[order], starts))))

    # -- plans -------------------------------------------------------------------------------

    def _groups(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per group (rows are sorted by group): key, first row, rows, oldest first_seen, newest update."""
        keys = self.table.column("group_key")
        starts = np.flatnonzero(np.r_[True, pc.not_equal(keys[1:], keys[:-1]).to_numpy(zero_copy_only=False)])
        counts = np.diff(np.r_[starts, len(keys)])
        return (keys.take(pa.array(starts)).to_pylist(), starts, counts,
                np.minimum.reduceat(_column(self.table, "first_seen_ms"), starts),
                np.maximum.reduceat(_column(self.table, "last_update_ms"), starts))

    def plan_due(self, now_ms: int, policy: Policy, tracked: bool = False, *,
                 shape: Shape = REFERENCE_SHAPE) -> list[tuple[str, GroupPlan[Member]]]:
        """:func:`plan_group` at ``now_ms`` for every due group (claims split as messages of event
        shape ``shape``); claimed rows leave the table.
        Returns the plans that claim something."""
        if len(self) == 0:
            return []
        keys, starts, counts, oldest, newest = self._groups()
        due = is_due(counts, oldest, newest, now_ms, policy)
        plans, claimed = [], []
        for g in np.flatnonzero(due):
            first = int(starts[g])
            members = [m for _, _, m in _members(self.table.slice(first, int(counts[g])))]
            # split where a sum would pass int64 (split.fitting_prefix)
            plan = plan_group(keys[g], members, now_ms, policy, split=claim_split(keys[g], now_ms, policy, tracked,
                                                                                      shape=shape))
            if plan.claims:
                row_of = {m.position: first + i for i, m in enumerate(members)}
                claimed += [row_of[m.position] for claim in plan.claims for m in claim.rows]
                plans.append((keys[g], plan))
        if claimed:
            keep = np.ones(len(self), dtype=bool)
            keep[claimed] = False
            self.table = self.table.filter(pa.array(keep))
        return plans

    def next_due_ms(self, policy: Policy) -> int | None:
        """The earliest time a group of the shard becomes due if nothing else arrives."""
        if len(self) == 0:
            return None
        _, _, counts, oldest, newest = self._groups()
        return int(due_at_ms(counts, oldest, newest, policy, minimum=np.minimum, where=np.where).min())

    # -- other layouts -----------------------------------------------------------------------

    def members(self) -> Iterator[tuple[str, RowKey, Member]]:
        """Every row as (group key, (bucket, item id), member)."""
        return _members(self.table)

    @classmethod
    def of_members(cls, rows: Iterable[tuple[str, RowKey, Member]]) -> PendingTable:
        """The table holding ``rows`` (keys unique)."""
        import json

        columns: dict[str, list] = {name: [] for name in SCHEMA.names}
        for group, (bucket, item), m in rows:
            for name, value in zip(SCHEMA.names, (
                    group, bucket, item, m.position.topic, m.position.partition, m.position.offset,
                    stored_text(m.items) if isinstance(m.items, EventView)
                    else json.dumps([list(i) for i in m.items], separators=(",", ":"), ensure_ascii=False),
                    m.first_seen_ms, m.last_update_ms, m.merged_events, m.record_ts_ms), strict=True):
                columns[name].append(value)
        table = pa.table(columns, schema=SCHEMA)
        return cls(PendingTable._merge(table, stored=table.num_rows))
