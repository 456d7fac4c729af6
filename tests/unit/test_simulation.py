"""The replay's specialised simulation gives exactly the reference simulation's batches.

Random histories: a few items per group, timestamps spread around the policy's windows (and
across a month boundary, so rows of one item split by bucket), duplicate positions, positions
out of timestamp order. Policy rules added to ``policy.py`` reach both simulations; this test
keeps them equal.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from consolidator.rules.buffer import BufferedEvent
from consolidator.rules.events import SourcePosition
from consolidator.rules.policy import Policy
from consolidator.rules.simulation import simulate_group
from consolidator.spark.replay import simulate_group_fast

MONTH_END = 1_798_761_600_000  # 2027-01-01T00:00:00Z: histories straddle a bucket boundary

policies = st.builds(
    Policy,
    debounce_ms=st.sampled_from([1_000, 5_000, 30_000, 60_000]),
    hard_window_ms=st.sampled_from([10_000, 90_000, 300_000]),
    max_batch_size=st.integers(1, 6),
    tick_interval_ms=st.sampled_from([1_000, 7_000, 30_000]),
)

events = st.builds(
    lambda partition, offset, at, item, sku, quantity: BufferedEvent(
        SourcePosition("orders", partition, offset), MONTH_END + at, f"O{item}", ((f"S{sku}", quantity),)),
    st.integers(0, 2), st.integers(0, 40), st.integers(-200_000, 200_000), st.integers(0, 5),
    st.integers(0, 3), st.integers(0, 9),
)


def batches(result) -> list[tuple]:
    return [(b.reason, b.flushed_at_ms, b.members, b.message) for b in result.batches]


@settings(max_examples=400, deadline=None)
@given(history=st.lists(events, max_size=60), policy=policies)
def test_specialised_simulation_equals_the_reference(history, policy):
    reference = simulate_group("WH-1", history, policy)
    fast = simulate_group_fast("WH-1", history, policy)
    assert batches(fast) == batches(reference)
    assert (fast.records_in, fast.replayed) == (reference.records_in, reference.replayed)
