"""A group's rate state, read and written inside the claim's own transaction.

``BatchStore.claim`` calls :func:`rate_gate` first (it locks the group's state row with
``FOR UPDATE``, so concurrent claimers of one group queue here) and :func:`rate_admit` after
the rows are claimed; a refusal claims nothing. The limit thus holds with several flushers at
once and without the Redis lock.
"""

from __future__ import annotations

from dataclasses import dataclass

from consolidator.rules.policy import (
    RateLimit,
    RateState,
    admit,
    next_allowed_ms,
    rate_time,
    refuse,
)


@dataclass(frozen=True)
class Throttled:
    """A claim refused by the group's rate limit: nothing was claimed."""

    group_key: str
    until_ms: int  # next allowed claim
    since_ms: int  # first refusal since the group's last claim


def encode_recent(recent: tuple[int, ...]) -> str:
    return ",".join(str(t) for t in recent)


def decode_recent(text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in text.split(",") if t)


def ensure_rate_row(cur, group_key: str, now_ms: int) -> None:
    """Create the group's rate state row (run in its own short transaction)."""
    cur.execute(
        "INSERT IGNORE INTO group_rate_state (group_key, recent_ms, updated_at_ms) VALUES (%s, '', %s)",
        (group_key, now_ms),
    )


def rate_gate(cur, group_key: str, limit: RateLimit, now_ms: int) -> tuple[RateState, int] | Throttled | None:
    """Lock the group's rate state. When one more claim is allowed, returns the state and the
    time the claim counts at (:func:`~consolidator.rules.policy.rate_time`, ``now_ms`` unless another
    flusher already claimed later); a :class:`Throttled` (refusal recorded) when not; None when
    the state row does not exist yet."""
    cur.execute(
        "SELECT recent_ms, throttled_since_ms FROM group_rate_state WHERE group_key = %s FOR UPDATE",
        (group_key,),
    )
    row = cur.fetchone()
    if row is None:
        return None
    state = RateState(decode_recent(row["recent_ms"]), row["throttled_since_ms"])
    at = rate_time(state, now_ms)
    allowed_at = next_allowed_ms(state.recent_ms, at, limit)
    if allowed_at <= at:
        return state, at
    refused = refuse(state, at)
    cur.execute(
        "UPDATE group_rate_state SET throttled_since_ms = %s, throttled_until_ms = %s, updated_at_ms = %s"
        " WHERE group_key = %s",
        (refused.throttled_since_ms, allowed_at, now_ms, group_key),
    )
    assert refused.throttled_since_ms is not None
    return Throttled(group_key, allowed_at, refused.throttled_since_ms)


def rate_admit(cur, group_key: str, state: RateState, limit: RateLimit, now_ms: int) -> int:
    """Record an allowed claim at ``now_ms`` (same transaction as the claim and :func:`rate_gate`).
    Returns how long the group was held back."""
    admitted, held = admit(state, now_ms, limit)
    cur.execute(
        "UPDATE group_rate_state SET recent_ms = %s, throttled_since_ms = NULL, throttled_until_ms = NULL,"
        " updated_at_ms = %s WHERE group_key = %s",
        (encode_recent(admitted.recent_ms), now_ms, group_key),
    )
    return held


def prune_rate_states(cur, idle_before_ms: int) -> int:
    """Delete the rate state of the groups that neither claimed nor were refused since
    ``idle_before_ms``. Safe when ``idle_before_ms`` is at least
    :data:`~consolidator.rules.policy.MAX_RATE_PERIOD_MS` ago: every claim time such a row holds is
    then outside any window, and the group starts again from an empty state, as it would."""
    return int(cur.execute("DELETE FROM group_rate_state WHERE updated_at_ms < %s", (idle_before_ms,)))
