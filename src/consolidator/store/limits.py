"""Per-group rate limits: the operators' overrides and the rate state read outside a claim.

Guarantees:
- overrides are read by the flush once per tick; the rate state itself is read and written in
  the claim's own transaction (``store/rate.py``).
"""

from __future__ import annotations

from consolidator.rules.policy import RateLimit, RateState
from consolidator.store.connection import Connection
from consolidator.store.rate import decode_recent, prune_rate_states


class LimitStore(Connection):
    # -- overrides (``consolidator limits``) -------------------------------------------------

    def set_limit(self, group_key: str, limit: RateLimit, now_ms: int) -> None:
        with self.transaction() as cur:
            cur.execute(
                "INSERT INTO group_rate_limits (group_key, batches, period_ms, updated_at_ms) VALUES (%s, %s, %s, %s)"
                " ON DUPLICATE KEY UPDATE batches = VALUES(batches), period_ms = VALUES(period_ms),"
                " updated_at_ms = VALUES(updated_at_ms)",
                (group_key, limit.batches, limit.period_ms, now_ms),
            )

    def clear_limit(self, group_key: str) -> bool:
        """Remove the group's override; False when it had none."""
        with self.transaction() as cur:
            return bool(cur.execute("DELETE FROM group_rate_limits WHERE group_key = %s", (group_key,)))

    def limits(self) -> dict[str, RateLimit]:
        """Every per-group override."""
        with self.transaction() as cur:
            cur.execute("SELECT group_key, batches, period_ms FROM group_rate_limits ORDER BY group_key")
            return {r["group_key"]: RateLimit(int(r["batches"]), int(r["period_ms"])) for r in cur.fetchall()}

    def throttled_groups(self) -> list[dict]:
        """Groups refused by their rate limit since their last claim, with the next allowed time
        as of that refusal (the earliest first)."""
        with self.transaction() as cur:
            cur.execute(
                "SELECT group_key, throttled_since_ms, throttled_until_ms FROM group_rate_state"
                " WHERE throttled_since_ms IS NOT NULL ORDER BY throttled_until_ms, group_key"
            )
            return list(cur.fetchall())

    def rate_states(self, group_keys: list[str]) -> dict[str, RateState]:
        """The rate states of ``group_keys`` (absent: never claimed under a limit). Read only."""
        if not group_keys:
            return {}
        marks = ", ".join(["%s"] * len(group_keys))
        with self.transaction() as cur:
            cur.execute(
                f"SELECT group_key, recent_ms, throttled_since_ms FROM group_rate_state WHERE group_key IN ({marks})"
                " ORDER BY group_key",
                tuple(group_keys),
            )
            return {r["group_key"]: RateState(decode_recent(r["recent_ms"]), r["throttled_since_ms"])
                    for r in cur.fetchall()}

    def prune_rate_states(self, idle_before_ms: int) -> int:
        """:func:`~consolidator.store.rate.prune_rate_states` in its own transaction."""
        with self.transaction() as cur:
            return prune_rate_states(cur, idle_before_ms)
