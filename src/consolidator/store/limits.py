"""Per-group rate limits (overrides and state) and the time-to-live expiry of buffered rows.

Guarantees:
- overrides are read by the flush once per tick; the rate state itself is read and written in
  the claim's own transaction (``store/rate.py``);
- expired rows are claimed under an expiry record (``batches.kind = 'expiry'``, CLAIMED) and
  reach EXPIRED only through :meth:`LimitStore.mark_expired`, which the flush calls for the rows
  whose entries the dead-letter destination confirmed: the others stay CLAIMED and are retried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

from consolidator.batch import NO_EPOCHS, Member, batch_id
from consolidator.errors import StoreError
from consolidator.events import SourcePosition
from consolidator.policy import RateLimit, RateState
from consolidator.store.batches import MEMBER_COLUMNS, _member, member_rows
from consolidator.store.connection import Connection
from consolidator.store.epochs import duplicate_id_refused, id_epochs
from consolidator.store.members import member_condition, member_keys_text
from consolidator.store.rate import decode_recent, prune_rate_states

EXPIRY_REASON = "expired"


@dataclass(frozen=True)
class ExpiryBatch:
    """Rows over the TTL, claimed together; they go to the dead-letter destination."""

    batch_id: str
    group_key: str
    claimed_at_ms: int
    members: tuple[Member, ...]


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

    # -- time-to-live ------------------------------------------------------------------------

    def claim_expired(self, group_key: str, cutoff_ms: int, limit: int, now_ms: int,
                      epochs: Mapping[str, int] = NO_EPOCHS) -> ExpiryBatch | None:
        """Claim up to ``limit`` PENDING rows of the group whose newest event's record timestamp
        is before ``cutoff_ms``, oldest first, under one expiry record (CLAIMED), whose id names
        the topics' ``epochs`` (:class:`DuplicateBatchId` when a stored record has it)."""
        with self.transaction() as cur:
            cur.execute(
                f"SELECT id, bucket, {MEMBER_COLUMNS} FROM buffer_rows"
                " WHERE status = 'PENDING' AND group_key = %s AND record_ts_ms < %s"
                " ORDER BY first_seen_ms, pos_key LIMIT %s FOR UPDATE SKIP LOCKED",
                (group_key, cutoff_ms, limit),
            )
            rows = cur.fetchall()
            if not rows:
                return None
            members = tuple(_member(r) for r in rows)
            used = id_epochs(members, epochs)
            new_id = batch_id(group_key, (m.position for m in members), used, kind=EXPIRY_REASON)
            keys = [f"{r['id']:d},{r['bucket']:d}" for r in rows]
            updated = cur.execute(
                "UPDATE buffer_rows SET status = 'CLAIMED', batch_id = %s WHERE status = 'PENDING'"
                f" AND (id, bucket) IN ({','.join(f'({k})' for k in keys)})",
                (new_id,),
            )
            if updated != len(rows):
                raise StoreError(f"expiry of {group_key!r} raced: {updated} of {len(rows)} rows still PENDING")
            with duplicate_id_refused(new_id, group_key):
                cur.execute(
                    "INSERT INTO batches (batch_id, group_key, state, kind, flush_reason, member_count, claimed_at_ms,"
                    " member_keys, id_epochs) VALUES (%s, %s, 'CLAIMED', 'expiry', %s, %s, %s, %s, %s)",
                    (new_id, group_key, EXPIRY_REASON, len(rows), now_ms, member_keys_text(keys),
                     orjson.dumps(dict(sorted(used.items()))).decode()),
                )
        return ExpiryBatch(new_id, group_key, now_ms, members)

    def load_expiry(self, batch_id_: str) -> ExpiryBatch | None:
        """A CLAIMED expiry record and its rows (None when it is not CLAIMED any more)."""
        with self.transaction() as cur:
            cur.execute(
                "SELECT group_key, claimed_at_ms, member_keys FROM batches"
                " WHERE batch_id = %s AND state = 'CLAIMED' AND kind = 'expiry'",
                (batch_id_,),
            )
            head = cur.fetchone()
            if head is None:
                return None
            members = member_rows(cur, batch_id_, head["member_keys"])
        return ExpiryBatch(batch_id_, head["group_key"], head["claimed_at_ms"], members)

    def mark_expired(self, batch_id_: str, now_ms: int, positions: Sequence[SourcePosition] | None = None) -> int:
        """CLAIMED -> EXPIRED for the rows of an expiry record at ``positions`` (None: all of
        them): call only after the dead-letter destination confirmed their entries. The record
        itself becomes EXPIRED once none of its rows is CLAIMED. Returns the rows marked (0 when
        the record was not CLAIMED any more)."""
        with self.transaction() as cur:
            cur.execute(
                "SELECT member_keys FROM batches WHERE batch_id = %s AND state = 'CLAIMED' AND kind = 'expiry'"
                " FOR UPDATE",
                (batch_id_,),
            )
            head = cur.fetchone()
            if head is None:
                return 0
            members, args = member_condition(batch_id_, head["member_keys"])
            chosen, chosen_args = "", ()
            if positions is not None:
                if not positions:
                    return 0
                chosen = (" AND (src_topic, src_partition, src_offset) IN ("
                          + ", ".join(["(%s, %s, %s)"] * len(positions)) + ")")
                chosen_args = tuple(v for p in positions for v in p)
            marked = cur.execute(f"UPDATE buffer_rows SET status = 'EXPIRED' WHERE {members} AND status = 'CLAIMED'"
                                 + chosen, args + chosen_args)
            cur.execute(f"SELECT COUNT(*) AS n FROM buffer_rows WHERE {members} AND status = 'CLAIMED'", args)
            if int(cur.fetchone()["n"]) == 0:
                cur.execute("UPDATE batches SET state = 'EXPIRED', finished_at_ms = %s WHERE batch_id = %s",
                            (now_ms, batch_id_))
        return int(marked)
