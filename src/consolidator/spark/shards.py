"""The streaming job's state key: a shard of groups, stored as one value.

``transformWithStateInPandas`` calls Python once per state key and micro-batch, and every state
or timer access is a round trip between the Python worker and the JVM. Keyed by group, those
calls and round trips were most of a micro-batch (docs/guide/spark.md, "Throughput"); keyed by
``shard_of(group) = pmod(xxhash64(group), shards)``, a micro-batch costs a handful of round trips
per shard, whatever the number of groups.

Under a policy with a rate limit, TTL or byte cap, a :class:`Shard` holds its groups' PENDING
rows and rate state as one JSON value (:meth:`Shard.dump`; a plain policy keeps them as one
Arrow table, :mod:`consolidator.spark.pending`). Groups are decoded only when touched: an event arrived for them, or they
are due (the due time is stored next to each group). Each group is still exactly one
:class:`~consolidator.rules.buffer.PendingBuffer`, so the policy's decisions per group are the
per-group job's: same claims, same batch ids.

The number of shards is fixed for a checkpoint (state keys depend on it); :func:`check_shards`
refuses state written with another number.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import orjson

from consolidator.rules.batch import Member
from consolidator.rules.buffer import PendingBuffer, RowKey
from consolidator.rules.events import SourcePosition
from consolidator.rules.policy import GroupPlan, Policy, RateState
from consolidator.rules.shape import REFERENCE_SHAPE, EventView, Shape, stored_text
from consolidator.spark.columnar import parse_items

#: State keys per streaming query. At least the shuffle partitions of the stateful stage (a
#: shard is never split across tasks); more shards mean smaller values to rewrite, fewer mean
#: fewer Python calls and round trips per micro-batch.
DEFAULT_SHARDS = 16
POISON_SHARD = -1  # state key of poison records: dead letters, no state
POISON_GROUP = ""  # group column of poison records: valid group keys are never empty


class ShardMismatch(RuntimeError):
    """The checkpoint's state was written with another number of shards."""


def _rows(buffer: PendingBuffer) -> list:
    return [[bucket, item_id, m.position.topic, m.position.partition, m.position.offset,
             stored_text(m.items) if isinstance(m.items, EventView) else [list(i) for i in m.items], m.first_seen_ms, m.last_update_ms, m.merged_events, m.record_ts_ms]
            for (bucket, item_id), m in buffer.rows.items()]


def _buffer(group_key: str, entry: list) -> PendingBuffer:
    _, rows, recent, since, until = entry
    members = [((bucket, item_id), Member(SourcePosition(topic, partition, offset), item_id,
                                           parse_items(items) if isinstance(items, str)
                                           else tuple((sku, quantity) for sku, quantity in items),
                                           first, last, merged, record_ts))
               for bucket, item_id, topic, partition, offset, items, first, last, merged, record_ts in rows]
    return PendingBuffer.restore(group_key, members, RateState(tuple(recent), since), until)


def check_shards(stored_shards: int | None, shards: int) -> None:
    if stored_shards != shards:
        raise ShardMismatch(f"state written with {stored_shards} shards, query runs with {shards}: "
                            "keep the number of shards of a checkpoint")


class Shard:
    """The groups of one state key. Not thread-safe; one per Python call."""

    def __init__(self, shards: int, entries: dict[str, list] | None = None) -> None:
        self.shards = shards
        self._entries = entries or {}  # group -> [due_ms, rows, recent_ms, throttled_since, until]
        self._open: dict[str, PendingBuffer] = {}  # decoded (touched) groups

    @classmethod
    def load(cls, shards: int, stored: str | None, stored_shards: int | None) -> Shard:
        """The shard from its state value (None: no state yet)."""
        if stored is None:
            return cls(shards)
        check_shards(stored_shards, shards)
        return cls(shards, orjson.loads(stored))

    @classmethod
    def of_members(cls, shards: int, rows: Iterable[tuple[str, RowKey, Member]]) -> Shard:
        """A shard holding ``rows`` (group key, row key, member), without rate state."""
        by_group: dict[str, list[tuple[RowKey, Member]]] = {}
        for group_key, key, member in rows:
            by_group.setdefault(group_key, []).append((key, member))
        shard = cls(shards)
        for group_key, members in by_group.items():
            buffer = shard._open[group_key] = PendingBuffer.restore(group_key, members)
            buffer.seen = set()  # as buffer() gives it: duplicates inside one micro-batch are ignored
        return shard

    def members(self) -> Iterator[tuple[str, RowKey, Member]]:
        """Every row of every group as (group key, row key, member)."""
        for group_key in list(self._entries):
            self.buffer(group_key)
        for group_key, buffer in self._open.items():
            for key, member in buffer.rows.items():
                yield group_key, key, member

    def buffer(self, group_key: str) -> PendingBuffer:
        """The group's buffer, decoded on first use, with an empty position ledger (duplicates
        inside one micro-batch are ignored; across micro-batches the checkpoint feeds each
        offset once)."""
        buffer = self._open.get(group_key)
        if buffer is None:
            entry = self._entries.pop(group_key, None)
            buffer = PendingBuffer(group_key) if entry is None else _buffer(group_key, entry)
            buffer.seen = set()
            self._open[group_key] = buffer
        return buffer

    def plan_due(self, now_ms: int, policy: Policy, tracked: bool = False, *,
                 shape: Shape = REFERENCE_SHAPE) -> Iterator[tuple[str, GroupPlan[Member]]]:
        """:meth:`PendingBuffer.plan` at ``now_ms`` for every touched group and every group due
        by ``now_ms``; yields the plans that claim or expire something (``tracked``: the
        messages carry the tracking fields, counted under the byte cap; ``shape``: their event shape)."""
        for group_key in [g for g, entry in self._entries.items() if entry[0] is not None and entry[0] <= now_ms]:
            self.buffer(group_key)
        for group_key, buffer in self._open.items():
            plan = buffer.plan(now_ms, policy, tracked, shape=shape)
            if plan.claims or plan.expired:
                yield group_key, plan

    def next_due_ms(self, policy: Policy) -> int | None:
        """The earliest due time of the shard's groups (None: nothing pending)."""
        dues = [entry[0] for entry in self._entries.values() if entry[0] is not None]
        dues += [d for b in self._open.values() if (d := b.next_due_ms(policy)) is not None]
        return min(dues, default=None)

    def dump(self, policy: Policy) -> str | None:
        """The state value (None: no group holds rows or rate state, clear the state)."""
        for group_key, buffer in self._open.items():
            rate = buffer.rate
            if buffer.rows or rate.recent_ms or rate.throttled_since_ms is not None:
                self._entries[group_key] = [buffer.next_due_ms(policy), _rows(buffer), list(rate.recent_ms),
                                            rate.throttled_since_ms, buffer.throttled_until_ms]
        self._open.clear()
        return orjson.dumps(self._entries).decode() if self._entries else None

    def __len__(self) -> int:
        return len(self._entries) + len(self._open)
