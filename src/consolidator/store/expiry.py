"""The time-to-live expiry of buffered rows (the policy's ``event_ttl``).

Guarantees:
- expired rows are claimed under an expiry record (``batches.kind = 'expiry'``, CLAIMED) and
  reach EXPIRED only through :meth:`ExpiryStore.mark_expired`, which the flush calls for the rows
  whose entries the dead-letter destination confirmed: the others stay CLAIMED and are retried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

from consolidator.rules.batch import NO_EPOCHS, Member, batch_id
from consolidator.rules.errors import StoreError
from consolidator.rules.events import SourcePosition
from consolidator.store.batches import MEMBER_COLUMNS, _member, member_rows
from consolidator.store.connection import Connection
from consolidator.store.epochs import duplicate_id_refused, id_epochs
from consolidator.store.members import member_condition, member_keys_text

EXPIRY_REASON = "expired"


@dataclass(frozen=True)
class ExpiryBatch:
    """Rows over the TTL, claimed together; they go to the dead-letter destination."""

    batch_id: str
    group_key: str
    claimed_at_ms: int
    members: tuple[Member, ...]


class ExpiryStore(Connection):
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
            used = id_epochs((m.position for m in members), epochs)
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
            members, _ = member_rows(cur, batch_id_, head["member_keys"])
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
