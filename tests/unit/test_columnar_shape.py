"""The replay's columnar simulation under a generic event shape gives exactly the reference
simulation's batches (ids, members, latencies, message bytes).

Random specs and histories (``random_shapes``: every operation, full, projected or no member
payload, coalescing items, integers and doubles, absent values), decoded as the Spark replay
decodes them, over several groups in one chunk, around a month boundary (rows of one item split
by bucket), under random plain policies. A group the columnar path hands back must be one where a
batch is full or an integer output may leave int64.
"""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest
from random_shapes import random_history, random_shape

from consolidator.rules.batch import encode
from consolidator.rules.buffer import BufferedEvent
from consolidator.rules.events import FieldNames, KafkaRecord, PoisonEvent, decode
from consolidator.rules.policy import FlushReason, Policy
from consolidator.rules.shape import Shape, parse_outputs, stored_text
from consolidator.rules.shape_bounds import bounds_safe
from consolidator.rules.simulation import simulate_group
from consolidator.spark.columnar import make_chunk, parse_items
from consolidator.spark.columnar_shape import is_plain_shaped, simulate_chunk_shaped
from consolidator.spark.decode_shape import decode_kept

MONTH_END = 1_798_761_600_000  # 2027-01-01T00:00:00Z


def _decoded(records: list[KafkaRecord], names: FieldNames) -> list[tuple[str, BufferedEvent, str]]:
    """(group key, event, stored items text) of each valid record, as the replay decodes it."""
    out = []
    for record in records:
        try:
            event = decode(record, names, 262_144)
        except PoisonEvent:
            continue
        text = stored_text(event.items)
        out.append((event.group_key, BufferedEvent(event.position, event.timestamp_ms, event.item_id,
                                                   parse_items(text)), text))
    return out


def _check(history: list[tuple[str, BufferedEvent, str]], policy: Policy, names: FieldNames,
           kept: list | None = None) -> set[str]:
    """Asserts the columnar batches equal the reference's; returns the groups handed back.
    ``kept``: each event's ``decode_shape.Kept`` (None: read its items text), as the replay's
    decoding after the shuffle gives them (the items text then null)."""
    assert is_plain_shaped(policy, names)
    texts = [t if kept is None or kept[i] is None else None for i, (_, _, t) in enumerate(history)]
    chunk = make_chunk([g for g, _, _ in history], [e.timestamp_ms for _, e, _ in history],
                       [e.position.topic for _, e, _ in history], [e.position.partition for _, e, _ in history],
                       [e.position.offset for _, e, _ in history], [e.item_id for _, e, _ in history],
                       pa.array(texts, pa.string()), kept)
    batches, handed_back = simulate_chunk_shaped(chunk, policy, names)
    got: dict[str, list] = {}
    for b in batches.to_pylist():
        got.setdefault(b["group_key"], []).append(
            (b["reason"], b["flushed_at_ms"], b["batch_id"], b["members"], b["event_count"], b["latencies_ms"],
             b["body"]))
    back = set()
    for key in sorted({g for g, _, _ in history}):
        reference = simulate_group(key, [e for g, e, _ in history if g == key], policy, names)
        if chunk.group_keys.index(key) in handed_back:
            assert key not in got
            back.add(key)
            assert (any(b.reason == FlushReason.FULL or len(b.members) == policy.max_batch_size
                        for b in reference.batches)
                    or not bounds_safe(names.shape, [e.items.event for g, e, _ in history if g == key]))
            continue
        expected = [(str(b.reason), b.flushed_at_ms, b.batch_id, len(b.members), b.message["event_count"],
                     b.latencies_ms, encode(b.message).decode()) for b in reference.batches]
        assert got.get(key, []) == expected
    return back


def _policy(rng: random.Random) -> Policy:
    return Policy(debounce_ms=rng.choice([1_000, 20_000, 60_000]), hard_window_ms=rng.choice([30_000, 300_000]),
                  max_batch_size=rng.choice([2, 4, 500]), tick_interval_ms=rng.choice([1_000, 30_000]))


@pytest.mark.parametrize("seed", range(60))
def test_columnar_shaped_simulation_equals_the_reference(seed):
    rng = random.Random(seed)
    shape = random_shape(rng)
    names = FieldNames(group_key="tenant", item_id="user", shape=shape)
    start = MONTH_END - rng.choice([60_000, 1_000_000, 3_000_000])
    records = random_history(rng, start, count=rng.choice([20, 150]))
    history = _decoded(records, names)
    policy = _policy(rng)
    _check(history, policy, names)
    # the same events as decoding after the shuffle keeps them (some left to their items text)
    valid = [r.value for r in records if _valid(r, names)]
    kept = decode_kept(valid, names, 262_144)[2]
    assert any(k is not None for k in kept)
    assert _check(history, policy, names, kept) == _check(history, policy, names)


def _valid(record: KafkaRecord, names: FieldNames) -> bool:
    try:
        decode(record, names, 262_144)
    except PoisonEvent:
        return False
    return True


def test_groups_whose_sums_may_leave_int64_are_handed_back_and_the_others_kept():
    shape = Shape(parse_outputs(json.dumps([{"name": "total", "op": "sum", "path": "amount"},
                                            {"name": "last", "op": "last", "path": "amount"}])), True)
    names = FieldNames(group_key="tenant", item_id="user", shape=shape)
    records = [KafkaRecord("t", 0, offset, MONTH_END + offset, None, json.dumps(
        {"tenant": tenant, "user": f"u{offset}", "amount": amount}).encode())
        for offset, (tenant, amount) in enumerate([("big", 2**62), ("big", 2**62), ("big", -5), ("small", 3),
                                                   ("small", 2.5)])]
    policy = Policy(debounce_ms=60_000, hard_window_ms=300_000, tick_interval_ms=1_000)
    assert _check(_decoded(records, names), policy, names) == {"big"}
