"""The replay's columnar simulation gives exactly the reference simulation's batches.

Random histories of several groups in one chunk: timestamps spread around the policy's windows
(often on whole seconds, so arrivals fall exactly on ticks and window ends) and across a month boundary (rows of one item split by bucket), duplicate positions (also with
another timestamp), positions out of timestamp order, several topics. A group the columnar path
hands back (a session reaching ``max_batch_size`` rows, or one whose rows' quantities together
pass int64) must really be one where a batch is full or its rows' quantities pass int64.
"""

from __future__ import annotations

import json

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import examples

from consolidator.rules.batch import encode
from consolidator.rules.buffer import BufferedEvent
from consolidator.rules.events import MAX_QUANTITY, SourcePosition
from consolidator.rules.policy import FlushReason, Policy
from consolidator.rules.simulation import simulate_group
from consolidator.spark.columnar import make_chunk, simulate_chunk

MONTH_END = 1_798_761_600_000  # 2027-01-01T00:00:00Z: histories straddle a bucket boundary

policies = st.builds(
    Policy,
    debounce_ms=st.sampled_from([1_000, 5_000, 30_000, 60_000]),
    hard_window_ms=st.sampled_from([10_000, 90_000, 300_000]),
    max_batch_size=st.sampled_from([1, 2, 3, 5, 500]),
    tick_interval_ms=st.sampled_from([1_000, 7_000, 30_000]),
)

events = st.tuples(
    st.sampled_from(["WH-1", "WH-2", 'é"\\']),
    st.builds(
        lambda topic, partition, offset, at, item, sku, quantity: BufferedEvent(
            SourcePosition(topic, partition, offset), MONTH_END + at, f"O{item}" if item else 'ü"',
            ((f"S{sku}", quantity), (f"S{sku + 1}", 1))[: sku % 3]),
        st.sampled_from(["orders", "a", "b\\t"]), st.integers(0, 2), st.integers(0, 40),
        st.one_of(st.integers(-200_000, 200_000), st.integers(-200, 200).map(lambda s: s * 1_000),
                  st.integers(0, 8).map(lambda s: s * 5_000)),
        st.integers(0, 5), st.integers(0, 3), st.integers(0, 2**62)),
)


def columnar(history):
    chunk = make_chunk([g for g, _ in history], [e.timestamp_ms for _, e in history],
                       [e.position.topic for _, e in history], [e.position.partition for _, e in history],
                       [e.position.offset for _, e in history], [e.item_id for _, e in history],
                       [_items_json(e.items) for _, e in history])
    return chunk


def _items_json(items) -> str:
    return json.dumps(items, separators=(",", ":"), ensure_ascii=False)


@settings(max_examples=examples(500), deadline=None)
@given(history=st.lists(events, max_size=80), policy=policies)
@example(  # handed back for its quantities (2 x 2^62 over the item's two month rows), no batch full
    history=[("WH-1", BufferedEvent(SourcePosition("orders", 0, 0), MONTH_END, 'ü"', ())),
             ("WH-1", BufferedEvent(SourcePosition("orders", 0, 0), MONTH_END - 1, 'ü"', (("S1", 2**62),))),
             ("WH-1", BufferedEvent(SourcePosition("orders", 0, 1), MONTH_END, 'ü"', (("S1", 2**62),)))],
    policy=Policy(debounce_ms=1_000, hard_window_ms=10_000, max_batch_size=3, tick_interval_ms=1_000))
def test_columnar_simulation_equals_the_reference(history, policy):
    chunk = columnar(history)
    batches, handed_back = simulate_chunk(chunk, policy)
    got: dict[str, list] = {}
    for b in batches.to_pylist():
        got.setdefault(b["group_key"], []).append(
            (b["reason"], b["flushed_at_ms"], b["batch_id"], b["members"], b["event_count"], b["latencies_ms"],
             b["body"]))
    for key in sorted({g for g, _ in history}):
        reference = simulate_group(key, [e for g, e in history if g == key], policy)
        replays = int((~chunk.first[chunk.group == chunk.group_keys.index(key)]).sum())
        assert replays == reference.replayed
        if chunk.group_keys.index(key) in handed_back:
            assert key not in got
            assert any(b.reason == FlushReason.FULL or len(b.members) == policy.max_batch_size
                       or sum(q for m in b.members for _, q in m.items) > MAX_QUANTITY  # bounded_prefix may cut
                       for b in reference.batches)
            continue
        expected = [(b.reason, b.flushed_at_ms, b.batch_id, len(b.members), b.message["event_count"], b.latencies_ms,
                     encode(b.message).decode()) for b in reference.batches]
        assert got.get(key, []) == expected


def test_message_times_are_iso_ms_also_outside_the_years_numpy_writes_alike():
    from consolidator.rules.batch import iso_ms
    from consolidator.spark.columnar import _iso

    moments = [0, -1, 1_798_761_599_999, -30_610_224_000_001, -30_610_224_000_000, 253_402_300_799_999,
               253_402_300_800_000]
    for values in (moments[:4], moments[4:6], moments):
        assert _iso(np.asarray(values, dtype=np.int64)) == [iso_ms(v) for v in values]


def test_items_keep_integers_beyond_64_bits():
    """orjson reads such an integer as a float: the parser must not hand that on."""
    from consolidator.spark.columnar import parse_items

    assert parse_items('[["S",1180591620717411303424],["T",3]]') == (("S", 2**70), ("T", 3))
    assert type(parse_items('[["S",1180591620717411303424]]')[0][1]) is int


def test_quantities_summed_up_to_int64_exactly_and_a_session_past_it_handed_back():
    """Sums are int64 arrays: a session whose sum reaches 2**63-1 must still be written exactly,
    one past it (where int64 would wrap to a negative total) must go to the reference path."""
    policy = Policy(debounce_ms=5_000, hard_window_ms=90_000, max_batch_size=500, tick_interval_ms=1_000)

    def event(offset: int, at: int, sku: str, quantity: int) -> BufferedEvent:
        return BufferedEvent(SourcePosition("orders", 0, offset), MONTH_END + at, f"O{offset}", ((sku, quantity),))

    history = [("WH-max", event(1, 0, "S", 2**62)), ("WH-max", event(2, 1_000, "S", 2**62 - 1)),
               ("WH-over", event(3, 0, "S", 2**62)), ("WH-over", event(4, 1_000, "T", 2**62))]
    chunk = columnar(history)
    batches, handed_back = simulate_chunk(chunk, policy)
    assert handed_back == {chunk.group_keys.index("WH-over")}
    reference = simulate_group("WH-max", [e for g, e in history if g == "WH-max"], policy)
    assert batches.column("body").to_pylist() == [encode(b.message).decode() for b in reference.batches]
    assert json.loads(batches.column("body")[0].as_py())["items"] == [{"quantity": 2**63 - 1, "sku": "S"}]
