"""The pure flush policy with a manual clock: idle, hard window, full, reasons, batch plans."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from consolidator.rules.clock import ManualClock
from consolidator.rules.policy import (
    FlushReason,
    GroupStats,
    Policy,
    due_groups,
    due_reason,
    next_due_ms,
    next_tick_ms,
    plan_batches,
    stats_of,
)

T0 = 1_795_000_000_000
POLICY = Policy(debounce_ms=300_000, hard_window_ms=1_800_000, max_batch_size=500, tick_interval_ms=30_000)


@dataclass
class Row:
    first_seen_ms: int
    last_update_ms: int
    offset: int

    def order_key(self) -> tuple:
        return (self.first_seen_ms, self.offset)


def test_reason_labels_are_the_message_values():
    assert [str(r) for r in FlushReason] == ["idle", "hard_window", "full"]


def test_idle_fires_exactly_at_debounce_after_the_last_update():
    clock = ManualClock(T0)
    stats = GroupStats("WH-1", pending=3, oldest_first_seen_ms=T0, newest_update_ms=T0 + 10_000)
    clock.set(T0 + 10_000 + POLICY.debounce_ms - 1)
    assert due_reason(stats, clock.now_ms(), POLICY) is None
    clock.advance(1)
    assert due_reason(stats, clock.now_ms(), POLICY) is FlushReason.IDLE
    assert next_due_ms(stats, POLICY) == T0 + 10_000 + POLICY.debounce_ms


def test_constant_trickle_never_goes_idle_but_the_hard_window_fires():
    """An event every 60 s keeps resetting the debounce (300 s); the hard window (1800 s)
    still flushes, at the first tick on or after first-seen + hard window."""
    clock = ManualClock(T0)
    rows: list[Row] = []
    fired: list[tuple[int, FlushReason]] = []
    offset = 0
    while clock.now_ms() < T0 + 3_600_000 and not fired:
        if clock.now_ms() % 60_000 == T0 % 60_000:
            rows.append(Row(clock.now_ms(), clock.now_ms(), offset))
            offset += 1
        if clock.now_ms() % POLICY.tick_interval_ms == 0:
            claims, _ = plan_batches("WH-1", rows, clock.now_ms(), POLICY)
            fired.extend((clock.now_ms(), reason) for reason, _ in claims)
        reason = due_reason(stats_of("WH-1", rows), clock.now_ms(), POLICY)
        assert reason in (None, FlushReason.HARD_WINDOW), "the trickle must never look idle"
        clock.advance(1_000)
    assert fired, "the hard window never fired"
    at, reason = fired[0]
    assert reason is FlushReason.HARD_WINDOW
    assert at == next_tick_ms(T0 + POLICY.hard_window_ms, POLICY)
    assert at - T0 <= POLICY.hard_window_ms + POLICY.tick_interval_ms


def test_full_fires_at_max_batch_size_without_waiting():
    stats = GroupStats("WH-1", pending=POLICY.max_batch_size, oldest_first_seen_ms=T0, newest_update_ms=T0)
    assert due_reason(stats, T0, POLICY) is FlushReason.FULL
    smaller = GroupStats("WH-1", pending=POLICY.max_batch_size - 1, oldest_first_seen_ms=T0, newest_update_ms=T0)
    assert due_reason(smaller, T0, POLICY) is None


@pytest.mark.parametrize(
    ("pending", "age_ms", "idle_ms", "expected"),
    [
        (500, 0, 0, FlushReason.FULL),
        (500, 1_800_000, 300_000, FlushReason.FULL),  # full wins over every other reason
        (10, 1_800_000, 300_000, FlushReason.HARD_WINDOW),  # hard window wins over idle
        (10, 600_000, 300_000, FlushReason.IDLE),
        (10, 600_000, 299_999, None),
        (0, 9_999_999, 9_999_999, None),  # nothing pending, never due
    ],
)
def test_reason_precedence(pending, age_ms, idle_ms, expected):
    now = T0 + 10_000_000
    stats = GroupStats("WH-1", pending, oldest_first_seen_ms=now - age_ms, newest_update_ms=now - idle_ms)
    assert due_reason(stats, now, POLICY) == expected


def test_due_groups_oldest_first_with_reasons():
    now = T0 + 3_600_000
    groups = [
        GroupStats("B", 1, oldest_first_seen_ms=now - 400_000, newest_update_ms=now - 400_000),
        GroupStats("A", 1, oldest_first_seen_ms=now - 100_000, newest_update_ms=now - 100_000),  # not due
        GroupStats("C", 2, oldest_first_seen_ms=now - 2_000_000, newest_update_ms=now - 1_000),
        GroupStats("D", 500, oldest_first_seen_ms=now - 1_000, newest_update_ms=now - 1_000),
    ]
    assert [(s.group_key, r) for s, r in due_groups(groups, now, POLICY)] == [
        ("C", FlushReason.HARD_WINDOW),
        ("B", FlushReason.IDLE),
        ("D", FlushReason.FULL),
    ]


def test_plan_batches_cuts_full_batches_oldest_first_while_rows_are_due():
    policy = Policy(debounce_ms=300_000, hard_window_ms=1_800_000, max_batch_size=4, tick_interval_ms=30_000)
    rows = [Row(T0 + (i % 5) * 1000, T0 + 10_000, 100 - i) for i in range(10)]
    claims, left = plan_batches("WH-1", rows, T0 + 20_000, policy)
    assert [reason for reason, _ in claims] == [FlushReason.FULL, FlushReason.FULL]
    flat = [r for _, batch in claims for r in batch]
    assert flat == sorted(rows, key=Row.order_key)[:8]
    assert all(len(batch) == 4 for _, batch in claims)
    assert len(left) == 2  # 2 rows < max_batch_size and not idle yet: they stay pending
    claims_later, left_later = plan_batches("WH-1", left, T0 + 10_000 + 300_000, policy)
    assert [(reason, len(batch)) for reason, batch in claims_later] == [(FlushReason.IDLE, 2)]
    assert left_later == []


def test_next_due_names_the_reason_due_reason_gives_at_that_time_and_not_before():
    """What ``status --watch`` shows (why and when each pending group becomes due) is the rule
    itself: at the time :func:`next_due` gives, :func:`due_reason` gives its reason; a
    millisecond earlier, no reason (``full`` excepted: due from its newest update)."""
    import random

    from consolidator.rules.policy import next_due

    generator = random.Random(7)
    policy = Policy(debounce_ms=300, hard_window_ms=1_000, max_batch_size=5, tick_interval_ms=30)
    seen = set()
    for _ in range(2_000):
        oldest = T0 + generator.randrange(0, 2_000)
        stats = GroupStats("G", pending=generator.randrange(0, 7), oldest_first_seen_ms=oldest,
                           newest_update_ms=oldest + generator.randrange(0, 2_000))
        found = next_due(stats, policy)
        if stats.pending == 0:
            assert found is None
            continue
        reason, at = found
        seen.add(reason)
        assert due_reason(stats, at, policy) is reason
        if reason is not FlushReason.FULL:
            assert due_reason(stats, at - 1, policy) is None
        assert next_due_ms(stats, policy) == at
    assert seen == set(FlushReason)
