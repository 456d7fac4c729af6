"""The pure rate limit (sliding-window log) and event TTL rules, clock as a parameter."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consolidator.rules.policy import (
    FlushReason,
    Policy,
    RateLimit,
    RateState,
    admit,
    expiry_cutoff_ms,
    is_expired,
    next_allowed_ms,
    plan_group,
    rate_time,
    refuse,
)

T0 = 1_795_000_000_000
MINUTE = 60_000


@dataclass
class Row:
    first_seen_ms: int
    last_update_ms: int
    offset: int
    record_ts_ms: int | None = None

    def order_key(self) -> tuple:
        return (self.first_seen_ms, self.offset)


def test_a_burst_of_n_then_one_more_when_the_oldest_leaves_the_window():
    limit = RateLimit(2, MINUTE)
    state = RateState()
    assert next_allowed_ms(state.recent_ms, T0, limit) == T0
    state, held = admit(state, T0, limit)
    state, _ = admit(state, T0 + 1_000, limit)
    assert held == 0 and state.recent_ms == (T0, T0 + 1_000)
    assert next_allowed_ms(state.recent_ms, T0 + 2_000, limit) == T0 + MINUTE
    assert next_allowed_ms(state.recent_ms, T0 + MINUTE, limit) == T0 + MINUTE  # (now - period, now]
    state, _ = admit(state, T0 + MINUTE, limit)
    assert state.recent_ms == (T0 + 1_000, T0 + MINUTE)  # only the last `batches` are kept


def test_refusals_remember_the_first_and_the_next_claim_reports_the_wait():
    limit = RateLimit(1, MINUTE)
    state, _ = admit(RateState(), T0, limit)
    state = refuse(refuse(state, T0 + 10_000), T0 + 40_000)
    assert state.throttled_since_ms == T0 + 10_000
    state, held = admit(state, T0 + MINUTE, limit)
    assert held == MINUTE - 10_000 and state.throttled_since_ms is None


def test_a_claim_never_counts_before_the_groups_latest_claim():
    state = RateState((T0 + 5_000,))
    assert rate_time(state, T0) == T0 + 5_000 and rate_time(state, T0 + 9_000) == T0 + 9_000
    assert rate_time(RateState(), T0) == T0


def test_limits_are_validated():
    with pytest.raises(ValueError, match="batches"):
        RateLimit(0, MINUTE)
    with pytest.raises(ValueError, match="period"):
        RateLimit(1, 0)
    with pytest.raises(ValueError, match="ttl"):
        Policy(ttl_ms=-1)


def test_ttl_boundary_and_off():
    policy = Policy(ttl_ms=MINUTE)
    assert not is_expired(T0, T0 + MINUTE, policy) and is_expired(T0, T0 + MINUTE + 1, policy)
    assert not is_expired(None, T0 + 10 * MINUTE, policy)
    assert not is_expired(T0, T0 + 10 * MINUTE, Policy()) and expiry_cutoff_ms(T0, Policy()) is None
    assert expiry_cutoff_ms(T0 + MINUTE + 1, policy) == T0 + 1  # expired: record_ts < cutoff


def test_override_wins_over_the_default():
    policy = Policy(rate_limit=RateLimit(1, MINUTE), rate_overrides=(("A", RateLimit(5, MINUTE)),))
    assert policy.limit_for("A") == RateLimit(5, MINUTE) and policy.limit_for("B") == RateLimit(1, MINUTE)


def test_a_due_group_expires_old_rows_then_claims_within_its_rate():
    policy = Policy(debounce_ms=1_000, hard_window_ms=MINUTE, max_batch_size=2, tick_interval_ms=1_000,
                    ttl_ms=2 * MINUTE, rate_limit=RateLimit(1, MINUTE))
    now = T0 + 2_000
    rows = [Row(T0, T0, i, record_ts_ms=T0 - 3 * MINUTE if i % 3 == 0 else T0) for i in range(6)]
    plan = plan_group("WH", rows, now, policy)
    assert [r.offset for r in plan.expired] == [0, 3]
    assert [(c.reason, [r.offset for r in c.rows], c.held_back_ms) for c in plan.claims] == [
        (FlushReason.FULL, [1, 2], 0)]
    assert [r.offset for r in plan.remaining] == [4, 5] and plan.throttled_until_ms == now + MINUTE
    later = plan_group("WH", plan.remaining, now + MINUTE, policy, plan.rate)
    assert [(c.reason, c.held_back_ms) for c in later.claims] == [(FlushReason.FULL, MINUTE)]


def test_each_batch_a_claim_is_split_into_counts_against_the_rate():
    """A claim cut into batches (the byte cap, int64 sums) spends one claim of the rate per
    batch, as the Lambda path's claims do: the batch the rate refuses and the rest of its claim
    stay pending, and the next allowed plan starts a claim afresh from them."""
    policy = Policy(debounce_ms=1_000, hard_window_ms=MINUTE, max_batch_size=4, tick_interval_ms=1_000,
                    rate_limit=RateLimit(2, MINUTE))
    def split(reason: FlushReason, rows: list[Row]) -> list[list[Row]]:  # 1 row, 2 rows, the rest
        return [batch for batch in (rows[:1], rows[1:3], rows[3:]) if batch]

    rows = [Row(T0, T0, i) for i in range(6)]
    plan = plan_group("WH", rows, T0, policy, split=split)
    assert [[r.offset for r in c.rows] for c in plan.claims] == [[0], [1, 2]]
    assert [r.offset for r in plan.remaining] == [3, 4, 5] and plan.throttled_until_ms == T0 + MINUTE
    later = plan_group("WH", plan.remaining, T0 + MINUTE, policy, plan.rate, split=split)
    assert [([r.offset for r in c.rows], c.held_back_ms) for c in later.claims] == [([3], MINUTE), ([4, 5], 0)]
    assert later.remaining == [] and later.throttled_until_ms is None


def test_a_group_that_is_not_due_expires_nothing():
    policy = Policy(debounce_ms=MINUTE, hard_window_ms=10 * MINUTE, max_batch_size=10, ttl_ms=1)
    plan = plan_group("WH", [Row(T0, T0, 0, record_ts_ms=T0 - 10 * MINUTE)], T0 + 1_000, policy)
    assert plan.expired == [] and plan.claims == [] and len(plan.remaining) == 1


@settings(deadline=None)  # a 60-arrival example takes longer than 200 ms on a busy CI machine
@given(
    st.lists(st.tuples(st.integers(0, 40_000), st.integers(1, 8)), min_size=1, max_size=60),
    st.integers(1, 4), st.sampled_from([10_000, MINUTE, 5 * MINUTE]),
)
def test_claims_never_exceed_the_limit_in_any_window(arrivals, batches, period):
    """Rows arrive in bursts; a plan runs at every arrival: claim times keep to the limit and every
    row is claimed once, oldest first."""
    limit = RateLimit(batches, period)
    policy = Policy(debounce_ms=5_000, hard_window_ms=20_000, max_batch_size=3, tick_interval_ms=1_000,
                    rate_limit=limit)
    pending: list[Row] = []
    state, now, offset, claimed, times = RateState(), T0, 0, [], []
    for gap, count in arrivals:
        now += gap
        pending += [Row(now, now, offset + i) for i in range(count)]
        offset += count
        plan = plan_group("WH", pending, now, policy, state)
        state, pending = plan.rate, plan.remaining
        for claim in plan.claims:
            times.append(now)
            claimed += [r.offset for r in claim.rows]
    while pending:
        now += 1_000
        plan = plan_group("WH", pending, now, policy, state)
        state, pending = plan.rate, plan.remaining
        times += [now] * len(plan.claims)
        claimed += [r.offset for c in plan.claims for r in c.rows]
    assert claimed == list(range(offset))  # each row once, oldest first
    for index, t in enumerate(times):
        assert sum(1 for u in times[: index + 1] if u > t - period) <= batches
