"""The columnar shard state (:class:`PendingTable`, plain policies) decides exactly what the
per-group state (:class:`Shard` of :class:`PendingBuffer`) decides: random histories, stored and
loaded between micro-batches, give the same claims (reasons, members, order), the same pending
rows and the same next due time after every micro-batch."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from consolidator.rules.buffer import BufferedEvent
from consolidator.rules.events import SourcePosition
from consolidator.rules.policy import Policy
from consolidator.spark.columnar import parse_items
from consolidator.spark.pending import EVENT_SCHEMA, PendingTable
from consolidator.spark.shards import Shard

POLICIES = [
    Policy(debounce_ms=3_000, hard_window_ms=10_000, max_batch_size=3),
    Policy(debounce_ms=1_000, hard_window_ms=4_000, max_batch_size=2),
    Policy(debounce_ms=2_000, hard_window_ms=30_000, max_batch_size=500),
]
TOPICS = ["a", "Z", "é", "ab"]  # code point order differs from insertion and case order
MONTH_END = 1_796_083_200_000  # 2026-12-01T00:00:00Z: timestamps on both sides of it


def history(seed: int, batches: int = 30) -> list[tuple[int, list[tuple]]]:
    """(now, events) per micro-batch; events as EVENT_SCHEMA tuples, each position one record (a
    repeated position is the same record again). Some micro-batches are empty, some repeat a
    record, and the clock sometimes steps back a little."""
    rng = random.Random(seed)
    now, out, offset = MONTH_END - 20_000, [], 0
    for _ in range(batches):
        now += rng.choice([-300, 200, 700, 1_500, 3_000, 9_000])
        events = []
        for _ in range(rng.choice([0, 1, 3, 8, 20])):
            quantity = rng.choice([1, 7, 2**63 - 1])
            offset += rng.randrange(1, 3)
            events.append((f"G{rng.randrange(5)}", rng.choice(TOPICS), rng.randrange(3), offset,
                           MONTH_END + rng.randrange(-5_000, 5_000), f"o{rng.randrange(4)}",
                           f'[["SKU-{rng.randrange(3)}",{quantity}]]'))
        if events and rng.random() < 0.3:
            events.append(events[0])
        out.append((now, events))
    return out


def outcome(plans) -> list:
    return sorted((group, str(c.reason), tuple(c.rows)) for group, plan in plans for c in plan.claims)


def rows_of(state) -> list:
    return sorted(state.members())


def run_shard(policy: Policy, batches) -> list:
    stored, out = None, []
    for now, events in batches:
        shard = Shard.load(1, stored, 1)
        for group, topic, partition, offset, ts, item, items in events:
            shard.buffer(group).ingest(BufferedEvent(SourcePosition(topic, partition, offset), ts, item,
                                                     parse_items(items)), now)
        plans = list(shard.plan_due(now, policy))
        due = shard.next_due_ms(policy)
        stored = shard.dump(policy)
        out.append((outcome(plans), due, rows_of(Shard.load(1, stored, 1)) if stored else []))
    return out


def run_table(policy: Policy, batches) -> list:
    stored, out = None, []
    for now, events in batches:
        table = PendingTable.load(stored)
        table.ingest(pa.Table.from_pylist([dict(zip(EVENT_SCHEMA.names, e, strict=True)) for e in events],
                                          schema=EVENT_SCHEMA), now)
        plans = table.plan_due(now, policy)
        due = table.next_due_ms(policy)
        stored = table.dump()
        out.append((outcome(plans), due, rows_of(PendingTable.load(stored))))
    return out


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", range(40))
def test_columnar_state_decides_what_the_per_group_state_decides(policy, seed):
    batches = history(seed)
    expected = run_shard(policy, batches)
    assert any(claims for claims, _, _ in expected), "the history claims something"
    assert run_table(policy, batches) == expected


@pytest.mark.parametrize("seed", range(10))
def test_layouts_convert_both_ways_without_losing_a_row(seed):
    policy = POLICIES[2]  # nothing due: every event stays pending
    shard = Shard(1)
    for now, events in history(seed, batches=5):
        for group, topic, partition, offset, ts, item, items in events:
            shard.buffer(group).ingest(BufferedEvent(SourcePosition(topic, partition, offset), ts, item,
                                                     parse_items(items)), now)
    rows = rows_of(shard)
    table = PendingTable.of_members(rows)
    assert rows_of(table) == rows
    back = Shard.of_members(1, table.members())
    assert rows_of(back) == rows
    assert back.next_due_ms(policy) == table.next_due_ms(policy) == shard.next_due_ms(policy)


def test_an_empty_table_stores_nothing():
    table = PendingTable()
    table.ingest(EVENT_SCHEMA.empty_table(), 1_000)
    assert table.dump() is None and table.next_due_ms(POLICIES[0]) is None and table.plan_due(1_000, POLICIES[0]) == []


def generic(batches) -> list:
    """The history with each event's items replaced by what a generic shape keeps."""
    from consolidator.rules.shape import EventView, stored_text

    return [(now, [(*e[:6], stored_text(EventView({"n": len(e[6]), "tags": [e[5], None], "x": {"y": 1.5}})))
                   for e in events]) for now, events in batches]


@pytest.mark.parametrize("seed", range(8))
def test_rows_of_a_generic_shape_keep_their_event_in_both_layouts_and_across_checkpoints(seed):
    batches = generic(history(seed))
    expected = run_shard(POLICIES[0], batches)
    assert any(claims for claims, _, _ in expected)
    assert run_table(POLICIES[0], batches) == expected
    kept = {type(m.items).__name__ for claims, _, _ in expected for *_, rows in claims for m in rows}
    assert kept == {"EventView"}
    shard = Shard(1)
    for now, events in batches[:5]:
        for group, topic, partition, offset, ts, item, items in events:
            shard.buffer(group).ingest(BufferedEvent(SourcePosition(topic, partition, offset), ts, item,
                                                     parse_items(items)), now)
    rows = rows_of(shard)
    assert rows_of(PendingTable.of_members(rows)) == rows == rows_of(Shard.of_members(1, rows))
