"""Property: over random histories, rate limits and TTL (real MariaDB, manual clock), every group
stays within its limit in every sliding window; L, D, B and S hold; the expired rows are
exactly the rows whose newest event was over the TTL when the flush took them."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support import T0, record, sql
from test_flush import RecordingSink, ingest
from test_flush_limits import assert_accounted, assert_rate, claim_times

from consolidator.rules.policy import Policy, RateLimit, next_tick_ms
from consolidator.services.flush import FlushService
from consolidator.sinks.deadletter import FileDeadLetter

TTL = 120_000
POLICY = Policy(debounce_ms=20_000, hard_window_ms=60_000, max_batch_size=3, tick_interval_ms=10_000, ttl_ms=TTL)
GROUPS = ("G0", "G1", "G2")

events = st.lists(
    st.tuples(
        st.integers(0, 6_000),  # ms since the previous event
        st.sampled_from(GROUPS),
        st.integers(0, 9),  # item
        st.sampled_from([0, 0, 0, 30_000, TTL - 5_000, TTL + 1, 10 * TTL]),  # record age when ingested
    ),
    min_size=20, max_size=80,
)
limits = st.fixed_dictionaries({g: st.none() | st.builds(RateLimit, st.integers(1, 2),
                                                       st.sampled_from([10_000, 30_000, 120_000]))
                                for g in GROUPS})


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=events, group_limits=limits)
def test_rate_ttl_and_invariants_hold_over_random_histories(store, clock, tmp_path, history, group_limits):
    with store.transaction() as cur:  # one database for all examples: start each one empty
        for table in ("buffer_rows", "partition_offsets", "applied_positions", "batches", "group_rate_state",
                      "group_rate_limits"):
            cur.execute(f"DELETE FROM {table}")
    name = f"{len(list(tmp_path.iterdir()))}"
    sink = RecordingSink(tmp_path / f"out-{name}.jsonl")
    dead = FileDeadLetter(tmp_path / f"dead-{name}.jsonl")
    clock.set(T0)
    for group, limit in group_limits.items():
        if limit is not None:
            store.set_limit(group, limit, T0)
    service = FlushService(store=store, sink=sink, dead_letter=dead, policy=POLICY, clock=clock,
                           max_rows_per_tick=1_000_000)
    at, tick, ingested = T0, next_tick_ms(T0, POLICY), 0
    for offset, (gap, group, item, age) in enumerate(history):
        at += gap
        while tick < at:
            clock.set(tick)
            service.tick()
            tick += POLICY.tick_interval_ms
        clock.set(at)
        ingested += ingest(store, clock, [record(offset, location=group, order=f"{group}-{item}",
                                                 timestamp_ms=at - age)])
    for _ in range(500):
        clock.set(tick)
        service.tick()
        tick += POLICY.tick_interval_ms
        if not store.pending_group_stats() and not store.batches_in_state("CLAIMED"):
            break

    expired = dead.read()
    by_id = assert_accounted(store, sink.messages(), expired, ingested)
    for group, limit in group_limits.items():
        if limit is not None:
            assert_rate(claim_times(store, group), limit)
        else:
            assert not any("held_back_ms" in m for m in by_id.values() if m["group_key"] == group)
    # expired exactly when over the TTL at the claim: published rows were within it when claimed
    rows = sql(store, "SELECT r.status, r.record_ts_ms, b.claimed_at_ms FROM buffer_rows r"
                      " JOIN batches b ON b.batch_id = r.batch_id")
    for r in rows:
        over = r["claimed_at_ms"] - r["record_ts_ms"] > TTL
        assert over == (r["status"] == "EXPIRED"), r
    assert all(e["age_ms"] > TTL for e in expired)
    event(f"expired rows: {'some' if expired else 'none'}")
    event(f"held-back batches: {'some' if any('held_back_ms' in m for m in by_id.values()) else 'none'}")
