"""What is due now, read-only: the groups the policy makes due and, for a rate-limited group,
when its limit allows its next batch. The dry run and the flush use it; it claims nothing and
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


def due_groups_now(store: MySQLStore, policy: Policy, now_ms: int) -> list[DueGroup]:
    """The groups due at ``now_ms`` with their reasons, oldest first, each with the time its rate
    limit allows its next batch (None when it is not held back now). Reads the database only:
    claims nothing, writes nothing (the dry run)."""
    due = due_groups(store.pending_group_stats(), now_ms, policy)
    limits = rate_limits(store, policy)
    limited = [g.group_key for g, _ in due if limits.get(g.group_key, policy.rate_limit)]
    states = store.rate_states(limited) if limited else {}
    result = []
    for group, reason in due:
        limit, state = limits.get(group.group_key, policy.rate_limit), states.get(group.group_key)
        until = (None if limit is None or state is None
                 else next_allowed_ms(state.recent_ms, rate_time(state, now_ms), limit))
        result.append(DueGroup(group, reason, until if until is not None and until > now_ms else None))
    return result
