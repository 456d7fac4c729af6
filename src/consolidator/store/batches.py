"""Batches: claim PENDING rows under one batch id, count failed publishes, mark SENT or DEAD, revive.
Rows change state only through statements that name the state they expect.

One row write per flush: the claim is the only write of a buffer row (PENDING -> CLAIMED with
its batch id, in place), and it stores the rows' keys on the batch row (``store/members.py``).
SENT and DEAD live on the ``batches`` row; a row whose status is CLAIMED is in its
batch's state (CLAIMED, SENT, DEAD, or EXPIRED for an expiry record, whose rows are also marked
EXPIRED themselves). Rows marked SENT by a version before schema 7 keep that status."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

from consolidator.rules.batch import NO_EPOCHS, Member, batch_id
from consolidator.rules.errors import BatchRowsGone, StoreError
from consolidator.rules.events import SourcePosition
from consolidator.rules.policy import FlushReason, RateLimit, RateState
from consolidator.rules.shape import stored_items
from consolidator.rules.split import PLAIN, MessageOptions
from consolidator.rules.tracecontext import TraceContext
from consolidator.store.claims import ClaimCursor, next_batch, trace_contexts
from consolidator.store.connection import Connection
from consolidator.store.epochs import duplicate_id_refused, id_epochs
from consolidator.store.members import member_condition, member_keys_text
from consolidator.store.rate import Throttled, ensure_rate_row, rate_admit, rate_gate


@dataclass(frozen=True)
class ClaimedBatch:
    batch_id: str
    group_key: str
    reason: FlushReason
    claimed_at_ms: int
    attempts: int
    members: tuple[Member, ...]
    cut: bool = False  # the claim stopped at the byte cap: the rows after it belong to the same claim
    held_back_ms: int = 0  # how long the group's rate limit held this claim back
    # the members' trace contexts (those that have one), batch order: read with the members
    trace_contexts: tuple[TraceContext, ...] = ()


MEMBER_COLUMNS = ("src_topic, src_partition, src_offset, item_id, items, first_seen_ms, last_update_ms,"
                  " merged_events, record_ts_ms")
_position, _make_member = SourcePosition._make, Member._make


def _member(row: dict) -> Member:
    return _make_member((
        _position((row["src_topic"], row["src_partition"], row["src_offset"])), row["item_id"],
        stored_items(row["items"]), row["first_seen_ms"], row["last_update_ms"],
        row["merged_events"], row["record_ts_ms"],
    ))


def _claim_as_batch(cur, group_key: str, keys: list[str], positions: list[SourcePosition], reason: FlushReason,
                    now_ms: int, rate: tuple[RateLimit, RateState] | None, epochs: Mapping[str, int],
                    failed: str | None = None) -> tuple[str, int]:
    """Set the PENDING rows ``keys`` (``"id,bucket"`` texts of integers, claim order) CLAIMED under
    one new batch and store its batch row (``failed``: as a batch that already failed once,
    with that error). Returns its id (named by the topics' epochs, stored with them) and the
    held-back time the rate limit counted. :class:`StoreError` when a row is no longer PENDING."""
    used = id_epochs(positions, epochs)
    new_id = batch_id(group_key, positions, used)
    # the claim is the row's only write in a flush; the keys are integers formatted by the reader
    updated = cur.execute(
        "UPDATE buffer_rows SET status = 'CLAIMED', batch_id = %s WHERE status = 'PENDING'"
        f" AND (id, bucket) IN ({','.join(f'({k})' for k in keys)})",
        (new_id,),
    )
    if updated != len(keys):
        raise StoreError(f"claim of {group_key!r} raced: {updated} of {len(keys)} rows still PENDING")
    held = 0 if rate is None else rate_admit(cur, group_key, rate[1], rate[0], now_ms)
    with duplicate_id_refused(new_id, group_key):
        cur.execute(
            "INSERT INTO batches (batch_id, group_key, state, flush_reason, member_count, claimed_at_ms,"
            " held_back_ms, member_keys, id_epochs, attempts, last_error)"
            " VALUES (%s, %s, 'CLAIMED', %s, %s, %s, %s, %s, %s, %s, %s)",
            (new_id, group_key, str(reason), len(keys), now_ms, held, member_keys_text(keys),
             orjson.dumps(dict(sorted(used.items()))).decode(), 0 if failed is None else 1,
             None if failed is None else failed[:1024]),
        )
    return new_id, held


def member_rows(cur, batch_id_: str, member_keys: str) -> tuple[tuple[Member, ...], tuple[TraceContext, ...]]:
    """The CLAIMED member rows of a batch, in batch order, and in the same order the trace
    contexts of those that have one."""
    members, args = member_condition(batch_id_, member_keys)
    cur.execute(f"SELECT {MEMBER_COLUMNS}, trace_parent, trace_state FROM buffer_rows WHERE {members}"
                " AND status = 'CLAIMED' ORDER BY first_seen_ms, pos_key", args)
    rows = cur.fetchall()
    return (tuple(_member(r) for r in rows),
            tuple(TraceContext(r["trace_parent"], r["trace_state"]) for r in rows if r["trace_parent"] is not None))


class BatchStore(Connection):
    def claim(
        self, group_key: str, reason: FlushReason, limit: int, now_ms: int, *,
        max_bytes: int | None = None, rate: RateLimit | None = None, expired_before_ms: int | None = None,
        cursor: ClaimCursor | None = None, epochs: Mapping[str, int] = NO_EPOCHS, options: MessageOptions = PLAIN,
    ) -> ClaimedBatch | Throttled | None:
        """Claim up to ``limit`` PENDING rows of the group, oldest first, under one batch id
        derived from their positions. Rows locked by a concurrent claimer are skipped; if any
        chosen row changed state meanwhile, nothing is claimed (B: one id per claim).

        With ``max_bytes``, only the rows whose message fits (:func:`~consolidator.rules.split.fit_count`)
        are taken, and never more than keep the sums within bounds
        (:func:`~consolidator.rules.split.bounded_prefix`); then the batch is marked ``cut``; pass the same
        ``cursor`` to claim the rest of the claim (``cursor.rows_left`` rows in all, ``limit``
        ignored): it carries the rows read and not taken, so every row of a claim is read once
        (``store/claims.py``). With ``rate`` the group's rate state is checked
        and updated in this same transaction (:class:`Throttled` and nothing claimed when it
        refuses). Rows whose record timestamp is before ``expired_before_ms`` are never claimed
        into a batch (they expire instead). The batch id names the members' topics' ``epochs``
        (:meth:`topic_epochs`); an id some batch already has raises :class:`DuplicateBatchId`
        and claims nothing. ``options``: what the message carries besides its members (shape,
        tracking); the byte cap counts them, and ``held_back_ms`` at its widest under ``rate``."""
        cursor = cursor or ClaimCursor(group_key, limit)
        if cursor.group_key != group_key:
            raise ValueError(f"a claim cursor of {cursor.group_key!r} cannot claim for {group_key!r}")
        for _ in range(2):
            with self.transaction() as cur:
                gate = None if rate is None else rate_gate(cur, group_key, rate, now_ms)
                if isinstance(gate, Throttled):
                    return gate
                if rate is None:
                    return self._claim_rows(cur, cursor, reason, now_ms, expired_before_ms, None, max_bytes, epochs,
                                            options)
                if gate is not None:  # a limited claim counts (and is dated) at the rate state's time
                    state, at = gate
                    return self._claim_rows(cur, cursor, reason, at, expired_before_ms, (rate, state), max_bytes,
                                            epochs, dataclasses.replace(options, rate_limited=True))
            with self.transaction() as cur:  # the group's first limited claim: create its state row
                ensure_rate_row(cur, group_key, now_ms)
        raise StoreError(f"rate state row of {group_key!r} still missing after it was created")

    def _claim_rows(self, cur, cursor: ClaimCursor, reason: FlushReason, now_ms: int,
                    expired_before_ms: int | None, rate: tuple[RateLimit, RateState] | None,
                    max_bytes: int | None, epochs: Mapping[str, int], options: MessageOptions) -> ClaimedBatch | None:
        group_key = cursor.group_key
        taken = next_batch(cur, cursor, reason, now_ms, max_bytes, expired_before_ms, options)
        if taken is None:
            return None
        rows, cut = taken
        keys, members = [r.key for r in rows], tuple(r.member for r in rows)
        new_id, held = _claim_as_batch(cur, group_key, keys, [m.position for m in members], reason, now_ms,
                                             rate, epochs)
        return ClaimedBatch(new_id, group_key, reason, now_ms, 0, members, cut=cut, held_back_ms=held,
                            trace_contexts=trace_contexts(rows))

    def claim_unbuilt(
        self, group_key: str, reason: FlushReason, now_ms: int, error: str, *, rate: RateLimit | None = None,
        expired_before_ms: int | None = None, epochs: Mapping[str, int] = NO_EPOCHS,
    ) -> str | Throttled | None:
        """After :meth:`claim` of the group raised an unexpected error (its batch could not be
        built): claim the group's first PENDING row (claim order) alone, without reading its
        items or building anything, as a batch that has already failed once (``attempts`` 1,
        ``last_error`` = ``error``). Its publishes are then retried as a failed publish is, and
        after ``max_attempts`` failures it is dead-lettered; the rows after it are claimed as
        usual. Returns the batch id, :class:`Throttled` when the rate limit refuses the group,
        None when no row is left to take."""
        for _ in range(2):
            with self.transaction() as cur:
                gate = None if rate is None else rate_gate(cur, group_key, rate, now_ms)
                if isinstance(gate, Throttled):
                    return gate
                if rate is None or gate is not None:
                    at = now_ms if gate is None else gate[1]
                    live, args = ("", ()) if expired_before_ms is None else (" AND record_ts_ms >= %s",
                                                                             (expired_before_ms,))
                    cur.execute("SELECT CONCAT(id, ',', bucket) AS k, src_topic, src_partition, src_offset"
                                f" FROM buffer_rows WHERE status = 'PENDING' AND group_key = %s{live}"
                                " ORDER BY first_seen_ms, pos_key LIMIT 1 FOR UPDATE SKIP LOCKED", (group_key, *args))
                    row = cur.fetchone()
                    if row is None:
                        return None
                    position = SourcePosition(row["src_topic"], row["src_partition"], row["src_offset"])
                    new_id, _ = _claim_as_batch(cur, group_key, [row["k"]], [position], reason, at,
                                                   None if gate is None else (rate, gate[0]), epochs,
                                                   failed=error)
                    return new_id
            with self.transaction() as cur:  # the group's first limited claim: create its state row
                ensure_rate_row(cur, group_key, now_ms)
        raise StoreError(f"rate state row of {group_key!r} still missing after it was created")

    def claimed_batch_ids(self, limit: int) -> list[str]:
        """CLAIMED batches, oldest claim first."""
        with self.transaction() as cur:
            cur.execute(
                "SELECT batch_id FROM batches WHERE state = 'CLAIMED'"
                " ORDER BY claimed_at_ms, batch_id LIMIT %s",
                (limit,),
            )
            return [r["batch_id"] for r in cur.fetchall()]

    def load_batch(self, batch_id_: str) -> ClaimedBatch | None:
        """The batch, its member rows and their trace contexts, if it is CLAIMED."""
        with self.transaction() as cur:
            cur.execute(
                "SELECT group_key, flush_reason, claimed_at_ms, attempts, held_back_ms, member_keys"
                " FROM batches"
                " WHERE batch_id = %s AND state = 'CLAIMED' AND kind = 'batch'",
                (batch_id_,),
            )
            head = cur.fetchone()
            if head is None:
                return None
            members, traces = member_rows(cur, batch_id_, head["member_keys"])
        return ClaimedBatch(
            batch_id_, head["group_key"], FlushReason(head["flush_reason"]), head["claimed_at_ms"],
            head["attempts"], members, held_back_ms=head["held_back_ms"], trace_contexts=traces,
        )

    def record_failure(self, batch_id_: str, error: str) -> int | None:
        """Count one failed publish of a CLAIMED batch and keep its error; returns the failed
        publishes so far (None when the batch is not CLAIMED any more). Only a publish the
        sink rejected counts: a publish whose outcome was never learned (a crash) does not."""
        with self.transaction() as cur:
            changed = cur.execute(
                "UPDATE batches SET attempts = attempts + 1, last_error = %s"
                " WHERE batch_id = %s AND state = 'CLAIMED'",
                (error[:1024], batch_id_),
            )
            if not changed:
                return None
            cur.execute("SELECT attempts FROM batches WHERE batch_id = %s", (batch_id_,))
            return int(cur.fetchone()["attempts"])

    def mark_sent(self, batch_id_: str, now_ms: int) -> bool:
        """CLAIMED -> SENT for the batch (its rows follow it); False when it was not CLAIMED any more."""
        return self._finish(batch_id_, "SENT", now_ms, None)

    def mark_dead(self, batch_id_: str, now_ms: int, error: str) -> bool:
        """CLAIMED -> DEAD for the batch (its rows follow it), after the dead-letter write succeeded."""
        return self._finish(batch_id_, "DEAD", now_ms, error)

    def _finish(self, batch_id_: str, state: str, now_ms: int, error: str | None) -> bool:
        with self.transaction() as cur:
            changed = cur.execute(
                "UPDATE batches SET state = %s, finished_at_ms = %s, last_error = COALESCE(%s, last_error)"
                " WHERE batch_id = %s AND state = 'CLAIMED' AND kind = 'batch'",
                (state, now_ms, None if error is None else error[:1024], batch_id_),
            )
        return bool(changed)

    def begin_publish(self, batch_ids: Sequence[str], now_ms: int) -> dict[str, int]:
        """Note the publish time of the batches still CLAIMED and return their failed publishes
        so far (the others are absent). Counts nothing: see :meth:`record_failure`."""
        if not batch_ids:
            return {}
        marks = ", ".join(["%s"] * len(batch_ids))
        with self.transaction() as cur:
            cur.execute(
                f"UPDATE batches SET last_attempt_ms = %s WHERE state = 'CLAIMED' AND batch_id IN ({marks})",
                (now_ms, *batch_ids),
            )
            cur.execute(
                f"SELECT batch_id, attempts FROM batches WHERE state = 'CLAIMED' AND batch_id IN ({marks})"
                " ORDER BY batch_id",
                tuple(batch_ids),
            )
            return {r["batch_id"]: int(r["attempts"]) for r in cur.fetchall()}

    def mark_sent_many(self, batch_ids: Sequence[str], now_ms: int) -> set[str]:
        """:meth:`mark_sent` for several batches in one transaction; returns the ids that were
        CLAIMED and are now SENT (the others were finished elsewhere and are left alone).
        Writes the batch rows only: a member row's state is its batch's."""
        if not batch_ids:
            return set()
        marks = ", ".join(["%s"] * len(batch_ids))
        with self.transaction() as cur:
            cur.execute(
                f"SELECT batch_id FROM batches WHERE state = 'CLAIMED' AND kind = 'batch' AND batch_id IN ({marks})"
                " ORDER BY batch_id FOR UPDATE",
                tuple(batch_ids),
            )
            claimed = [r["batch_id"] for r in cur.fetchall()]
            if claimed:
                marks = ", ".join(["%s"] * len(claimed))
                cur.execute(
                    f"UPDATE batches SET state = 'SENT', finished_at_ms = %s WHERE state = 'CLAIMED'"
                    f" AND batch_id IN ({marks})",
                    (now_ms, *claimed),
                )
        return set(claimed)

    def revive_dead_batch(self, batch_id_: str) -> bool:
        """DEAD -> CLAIMED with attempts reset (its rows follow it), so the next flush tick
        re-publishes it under the same batch id (dead-letter redrive). False when it is not DEAD;
        :class:`BatchRowsGone` (and nothing changed) when any of its rows is gone."""
        with self.transaction() as cur:
            cur.execute(
                "SELECT member_count, member_keys FROM batches"
                " WHERE batch_id = %s AND state = 'DEAD' AND kind = 'batch' FOR UPDATE",
                (batch_id_,),
            )
            head = cur.fetchone()
            if head is None:
                return False
            members, args = member_condition(batch_id_, head["member_keys"])
            cur.execute(f"SELECT COUNT(*) AS n FROM buffer_rows WHERE {members} AND status = 'CLAIMED'", args)
            missing = head["member_count"] - int(cur.fetchone()["n"])
            if missing:
                raise BatchRowsGone(f"batch {batch_id_}: {missing} of its {head['member_count']} rows were dropped"
                                    " with their partition; re-send the batch from its dead-letter entry")
            cur.execute("UPDATE batches SET state = 'CLAIMED', attempts = 0, finished_at_ms = NULL"
                        " WHERE batch_id = %s", (batch_id_,))
        return True

    def batch_counts(self) -> dict[str, int]:
        with self.transaction() as cur:
            cur.execute("SELECT state, COUNT(*) AS n FROM batches GROUP BY state ORDER BY state")
            return {r["state"]: int(r["n"]) for r in cur.fetchall()}

    def batches_in_state(self, state: str, limit: int = 100) -> list[dict]:
        with self.transaction() as cur:
            cur.execute(
                "SELECT batch_id, group_key, kind, flush_reason, member_count, attempts, claimed_at_ms,"
                " finished_at_ms, last_error FROM batches WHERE state = %s"
                " ORDER BY claimed_at_ms, batch_id LIMIT %s",
                (state, limit),
            )
            return list(cur.fetchall())
