"""The streaming job's work on one shard in one call, without Spark.

:class:`ShardStep` is everything the stateful processor of :mod:`consolidator.spark.streaming`
does with a shard's state row when Spark hands it a micro-batch's records
(:meth:`ShardStep.input_rows`) or an expired timer (:meth:`ShardStep.timer`): load the rows in the
layout of the policy (:class:`~consolidator.spark.pending.PendingTable` under a plain policy, with
or without a generic shape, else
:class:`~consolidator.spark.shards.Shard`), ingest, claim what is due, build the messages with the
field names' shape, and say what to store and which timer to delete or register. The processor only
reads the state row, applies the :class:`StepResult` to Spark's state and timers, and yields its
rows: so the cross-engine tests drive this very code, micro-batch by micro-batch, with a state
round trip in between, and no SparkSession.

Guarantees: a call's outcome depends only on the stored row, the records and ``now_ms`` (no clock,
no I/O); a shard left with rows is always left with a timer at or before its earliest due time.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from consolidator.rules.batch import build_message, encode
from consolidator.rules.buffer import BufferedEvent, PendingBuffer
from consolidator.rules.deadletter import expired_entry, poison_entry
from consolidator.rules.events import (
    FieldNames,
    KafkaRecord,
    PoisonEvent,
    PoisonReason,
    SourcePosition,
)
from consolidator.rules.policy import Policy
from consolidator.spark.columnar import is_plain, parse_items
from consolidator.spark.columnar_shape import is_plain_shaped
from consolidator.spark.delivery import BATCH
from consolidator.spark.pending import PendingTable
from consolidator.spark.shards import Shard, check_shards

DEAD_LETTER, EXPIRED = "dead_letter", "expired"


@dataclass(frozen=True)
class StepResult:
    """What one call did: output rows (``kind, group_key, batch_id, reason, body``), the shard's
    new state row (``groups, timer_ms, shards, rows``; None: clear the state), and the timer to
    delete, then the one to register (None: none)."""

    rows: list[tuple]
    state: tuple | None
    delete_timer: int | None
    register_timer: int | None


class ShardStep:
    """One shard's micro-batch step under ``policy`` for events read with ``names`` (whose shape and
    event times the messages take) with ``shards`` state keys; ``ack_key``: completion tracking
    (messages carry ack tokens)."""

    def __init__(self, policy: Policy, names: FieldNames, shards: int, ack_key: bytes | None = None) -> None:
        self.policy = policy
        self.names = names
        self.shards = shards
        self.ack_key = ack_key
        # rows as columns (PendingTable) under a plain policy, whatever its shape, else per group (Shard)
        self.plain = is_plain(policy, names) or is_plain_shaped(policy, names)

    def input_rows(self, stored: tuple | None, records, now_ms: int) -> StepResult:
        """A micro-batch's records of this shard (:data:`~consolidator.spark.packing.RECORD_COLUMNS`),
        ingested at ``now_ms`` (the batch's processing time), then whatever is due claimed."""
        shard, timer_ms = self.load(stored)
        if isinstance(shard, PendingTable):
            shard.ingest(records, now_ms)
        else:
            ingest(shard, records, now_ms)
        out = self.flush(shard, now_ms)
        return self.save(shard, timer_ms, now_ms, out)

    def timer(self, stored: tuple | None, now_ms: int) -> StepResult:
        """The shard's timer expired at ``now_ms``: claim what is due. Spark drops the expired
        timer after the call, so there is none to delete."""
        shard, _ = self.load(stored)
        out = self.flush(shard, now_ms)
        return self.save(shard, None, now_ms, out)

    # -- state row <-> shard ---------------------------------------------------------------

    def load(self, stored: tuple | None) -> tuple[PendingTable | Shard, int | None]:
        """The shard's rows in the layout of this policy (converted when the checkpoint was
        written under the other one), and its registered timer. ``stored``: the state row, None
        when no group of the shard holds rows or rate state."""
        if stored is None:
            return (PendingTable() if self.plain else Shard(self.shards)), None
        groups, timer_ms, shards, rows = stored
        timer_ms = int_or_none(timer_ms)
        if rows is None:
            shard = Shard.load(self.shards, groups, int_or_none(shards))
            return (PendingTable.of_members(shard.members()) if self.plain else shard), timer_ms
        check_shards(int_or_none(shards), self.shards)
        table = PendingTable.load(bytes(rows))
        return (table if self.plain else Shard.of_members(self.shards, table.members())), timer_ms

    def save(self, shard: PendingTable | Shard, timer_ms: int | None, now_ms: int, out: list[tuple]) -> StepResult:
        """The rows to store; a timer that fires at or before the shard's due time. A timer set
        earlier stays (it fires, finds nothing due, and sets the next one): the idle due time
        moves with every event, and moving the timer each time would cost two more round trips
        per shard and micro-batch. A timer at or before ``now_ms`` goes: every due group was
        just planned."""
        due = shard.next_due_ms(self.policy)
        delete = register = None
        if timer_ms is not None and (due is None or timer_ms <= now_ms or due < timer_ms):
            delete, timer_ms = timer_ms, None
        if due is not None and timer_ms is None:
            register = timer_ms = due
        if isinstance(shard, PendingTable):
            rows, groups = shard.dump(), None
        else:
            rows, groups = None, shard.dump(self.policy)
        state = None if rows is None and groups is None else (groups, timer_ms, self.shards, rows)
        return StepResult(out, state, delete, register)

    def flush(self, shard: PendingTable | Shard, now_ms: int) -> list[tuple]:
        """Claims of every group due at ``now_ms`` as batch rows, expired rows as dead-letter
        rows (like the Lambda path's expiry)."""
        out = []
        for group_key, plan in shard.plan_due(now_ms, self.policy, self.ack_key is not None,
                                                  shape=self.names.shape):
            for member in plan.expired:
                entry = expired_entry(group_key, member, now_ms, now_ms)
                out.append((EXPIRED, group_key, None, "expired", json.dumps(entry, sort_keys=True)))
            for claim in plan.claims:
                message = build_message(group_key, claim.rows, claim.reason, flushed_at_ms=now_ms,
                                        ack_key=self.ack_key, held_back_ms=claim.held_back_ms,
                                        shape=self.names.shape, event_times=self.names.event_times)
                out.append((BATCH, group_key, message["batch_id"], str(claim.reason), encode(message).decode()))
        return out


def ingest(shard: Shard, records, now_ms: int) -> None:
    """The records' events into their groups' buffers, one at a time, with one clock for the
    whole call: the order of ingest does not change the rows (the newest position wins, counts
    add up), so the records' order is as good as any."""
    buffers: dict[str, PendingBuffer] = {}
    items_of: dict[str, tuple] = {}  # the same items text, parsed once
    for group, t, p, o, ts, item, items in zip(*(records.column(name).to_pylist() for name in (
            "group_key", "topic", "partition", "offset", "timestamp_ms", "item_id", "items")), strict=True):
        buffer = buffers.get(group)
        if buffer is None:
            buffer = buffers[group] = shard.buffer(group)
        parsed = items_of.get(items)
        if parsed is None:
            parsed = items_of[items] = parse_items(items)
        buffer.ingest(BufferedEvent(SourcePosition(t, p, o), ts, item, parsed), now_ms)


def dead_letters(records, now_ms: int) -> list[tuple]:
    """The poison shard's records as dead-letter rows (no state)."""
    out = []
    for topic, partition, offset, ts, key, value, reason, detail in zip(*(records.column(name).to_pylist() for name in (
            "topic", "partition", "offset", "timestamp_ms", "key", "value", "poison_reason", "poison_detail")),
            strict=True):
        record = KafkaRecord(topic, int(partition), int(offset), int(ts), key, value)
        entry = poison_entry(record, PoisonEvent(PoisonReason(reason), detail), now_ms)
        out.append((DEAD_LETTER, None, None, reason, json.dumps(entry, sort_keys=True)))
    return out


def int_or_none(value) -> int | None:
    """A nullable long from Spark state (None, or NaN through pandas) as an int or None."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else int(value)


def job_step(policy: Policy, names: FieldNames, shards: int, ack_key: bytes | None = None) -> ShardStep:
    """The step the streaming job runs: its messages take the shape of the decoder (``names``),
    so the rows kept and the messages built agree."""
    return ShardStep(policy, names, shards, ack_key)
