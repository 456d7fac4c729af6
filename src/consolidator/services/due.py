"""What is due now and what will be, read-only: the groups the policy makes due and, for a
rate-limited group, when its limit allows its next batch; every pending group with why and when
it becomes due. The dry run, the flush and ``status --watch`` use it; it claims nothing and
writes nothing."""

from __future__ import annotations

from dataclasses import dataclass

from consolidator.rules.policy import (
    FlushReason,
    GroupStats,
    Policy,
    RateLimit,
    due_groups,
    next_allowed_ms,
    next_due,
    rate_time,
)
from consolidator.store.mysql import MySQLStore


@dataclass(frozen=True)
class DueGroup:
    """A due group as the dry run shows it: throttled until ``throttled_until_ms`` when set."""

    stats: GroupStats
    reason: FlushReason
    throttled_until_ms: int | None



def rate_limits(store: MySQLStore, policy: Policy) -> dict[str, RateLimit]:
    """The per-group overrides: the policy's, then the store's (``consolidator limits``)."""
    return {**dict(policy.rate_overrides), **store.limits()}


def _throttled_until(store: MySQLStore, policy: Policy, groups: list[GroupStats], now_ms: int) -> dict[str, int]:
    """Per group of ``groups`` held back by its rate limit at ``now_ms``: when the limit allows
    its next batch (groups not held back are absent)."""
    limits = rate_limits(store, policy)
    limited = [g.group_key for g in groups if limits.get(g.group_key, policy.rate_limit)]
    states = store.rate_states(limited) if limited else {}
    result = {}
    for key in limited:
        limit, state = limits.get(key, policy.rate_limit), states.get(key)
        until = None if state is None else next_allowed_ms(state.recent_ms, rate_time(state, now_ms), limit)
        if until is not None and until > now_ms:
            result[key] = until
    return result


def due_groups_now(store: MySQLStore, policy: Policy, now_ms: int) -> list[DueGroup]:
    """The groups due at ``now_ms`` with their reasons, oldest first, each with the time its rate
    limit allows its next batch (None when it is not held back now). Reads the database only:
    claims nothing, writes nothing (the dry run)."""
    due = due_groups(store.pending_group_stats(), now_ms, policy)
    throttled = _throttled_until(store, policy, [g for g, _ in due], now_ms)
    return [DueGroup(group, reason, throttled.get(group.group_key)) for group, reason in due]


@dataclass(frozen=True)
class PendingGroup:
    """A pending group as ``status --watch`` shows it: why and when the policy makes it due if
    nothing else arrives (:func:`consolidator.rules.policy.next_due`), and until when its rate
    limit holds its next batch back (None: not held back now)."""

    stats: GroupStats
    reason: FlushReason
    due_at_ms: int
    throttled_until_ms: int | None

    @property
    def flush_at_ms(self) -> int:
        """The earliest a batch of it can be claimed: when due, and no earlier than its limit allows."""
        return max(self.due_at_ms, self.throttled_until_ms or 0)


def pending_outlook(store: MySQLStore, policy: Policy, now_ms: int) -> list[PendingGroup]:
    """Every pending group, the one whose batch can be claimed first first (ties: oldest pending
    row, then group key). Reads the database only."""
    groups = store.pending_group_stats()
    throttled = _throttled_until(store, policy, groups, now_ms)
    result = []
    for stats in groups:
        found = next_due(stats, policy)
        if found is not None:
            result.append(PendingGroup(stats, found[0], found[1], throttled.get(stats.group_key)))
    return sorted(result, key=lambda g: (g.flush_at_ms, g.stats.oldest_first_seen_ms, g.stats.group_key))
