"""Shards of groups (the streaming job's state keys) decide exactly what one buffer per group
decides: random histories through :class:`Shard` (stored and loaded between micro-batches, groups
decoded only when touched or due) give the same claims and expiries as one
:class:`PendingBuffer` per group planned whenever it has input or is due."""

from __future__ import annotations

import random

import pytest

from consolidator.rules.buffer import BufferedEvent, PendingBuffer
from consolidator.rules.events import SourcePosition
from consolidator.rules.policy import Policy, RateLimit
from consolidator.spark.shards import Shard, ShardMismatch

POLICIES = [
    Policy(debounce_ms=3_000, hard_window_ms=10_000, max_batch_size=3),
    Policy(debounce_ms=2_000, hard_window_ms=8_000, max_batch_size=4, rate_limit=RateLimit(1, 5_000),
           ttl_ms=6_000),
    Policy(debounce_ms=1_000, hard_window_ms=4_000, max_batch_size=2, max_batch_bytes=900,
           rate_overrides=(("G1", RateLimit(2, 7_000)),)),
]


def history(seed: int, groups: int = 6, batches: int = 30) -> list[tuple[int, list[tuple[str, BufferedEvent]]]]:
    """(now, events) per micro-batch; some micro-batches are empty (timers only)."""
    rng = random.Random(seed)
    now, offset, out = 1_795_000_000_000, 0, []
    for _ in range(batches):
        now += rng.choice([200, 700, 1_500, 3_000, 9_000])
        events = []
        for _ in range(rng.choice([0, 0, 1, 3, 8])):
            group = f"G{rng.randrange(groups)}"
            ts = now - rng.randrange(0, 9_000)
            events.append((group, BufferedEvent(SourcePosition("t", rng.randrange(2), offset), ts,
                                                f"o{rng.randrange(4)}", (("SKU", rng.randrange(1, 9)),))))
            offset += 1
        if events and rng.random() < 0.2:
            events.append(events[0])  # a duplicate inside the micro-batch: ignored
        out.append((now, events))
    return out


def outcome(group_key, plan) -> list:
    return ([("expired", group_key, m.position) for m in plan.expired]
            + [(str(c.reason), group_key, tuple(m.position for m in c.rows), c.held_back_ms) for c in plan.claims])


def per_group(policy: Policy, batches) -> list:
    buffers: dict[str, PendingBuffer] = {}
    out = []
    for now, events in batches:
        touched = set()
        for group, event in events:
            buffer = buffers.setdefault(group, PendingBuffer(group))
            if group not in touched:
                buffer.seen, touched = set(), touched | {group}
            buffer.ingest(event, now)
        for group, buffer in buffers.items():
            due = buffer.next_due_ms(policy)
            if group in touched or (due is not None and due <= now):
                out += outcome(group, buffer.plan(now, policy))
    return out


def sharded(policy: Policy, batches, shards: int = 3) -> list:
    stored: dict[int, str | None] = {}
    out = []
    for now, events in batches:
        for index in range(shards):
            shard = Shard.load(shards, stored.get(index), shards)
            for group, event in events:
                if sum(map(ord, group)) % shards == index:
                    shard.buffer(group).ingest(event, now)
            for group, plan in shard.plan_due(now, policy):
                out += outcome(group, plan)
            stored[index] = shard.dump(policy)
    return sorted(out, key=repr)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", range(40))
def test_shards_decide_what_one_buffer_per_group_decides(policy, seed):
    batches = history(seed)
    expected = per_group(policy, batches)
    assert expected, "the history claims something"
    assert sharded(policy, batches) == sorted(expected, key=repr)


def test_untouched_groups_stay_encoded_and_due_ones_are_planned():
    policy = Policy(debounce_ms=1_000, hard_window_ms=60_000, max_batch_size=10)
    shard = Shard(4)
    for i, group in enumerate(["A", "B"]):
        shard.buffer(group).ingest(BufferedEvent(SourcePosition("t", 0, i), 0, "o", (("S", 1),)), 1_000 * i)
    assert [g for g, _ in shard.plan_due(900, policy)] == []  # none due yet
    stored = shard.dump(policy)
    loaded = Shard.load(4, stored, 4)
    assert len(loaded) == 2 and loaded.next_due_ms(policy) == 1_000
    assert [g for g, _ in loaded.plan_due(1_000, policy)] == ["A"]  # B (due at 2,000) stays encoded
    assert loaded._open.keys() == {"A"}
    assert Shard.load(4, loaded.dump(policy), 4).next_due_ms(policy) == 2_000  # A is gone


def test_state_written_with_another_number_of_shards_is_refused():
    with pytest.raises(ShardMismatch, match="8 shards"):
        Shard.load(4, "{}", 8)
