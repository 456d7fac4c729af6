"""Completion trackers: a batch sealed with N members, a bit per member, one completion outbox row.

Guarantees:
- ``seal`` is idempotent (re-sealing an existing batch changes nothing), so a re-publish may
  seal again;
- ``apply_acks`` locks the trackers it changes (``FOR UPDATE``, in batch id order) and sets
  bits; a bit already set changes nothing; "is it complete?" is ``acked_count =
  member_count``, O(1);
- exactly one ``apply_acks`` call sees a tracker reach its last member: that call builds the
  completion message and stores its bytes in the outbox (PENDING) in the same transaction
  (``AckResult.completed``); it publishes nothing. Whoever publishes after the commit sends
  those stored bytes and marks them PUBLISHED (:meth:`mark_completions_published`);
- a PENDING completion whose publisher died is handed out again by ``lease_completions``
  once its lease expired, with the same stored bytes (at least once across crashes);
- ``ack_key`` is the secret of the batches' ack tokens (``batch.ack_token``), one per database.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from consolidator.rules.batch import encode
from consolidator.rules.completion import (
    Ack,
    acked_indexes,
    build_completion,
    empty_bitmap,
    set_bits,
)
from consolidator.rules.errors import StoreError
from consolidator.store.connection import Connection

UNKNOWN_BATCH = "unknown_batch"
UNKNOWN_MEMBER = "unknown_member"
UNKNOWN_ITEM = "unknown_item"
NO_ITEM_LIST = "no_item_list"  # a tracker without its item ids: an ack by item id fails (retried)


@dataclass(frozen=True, slots=True)
class SealedBatch:
    """What a seal records: the batch and the item id of member i, in message order."""

    batch_id: str
    group_key: str
    item_ids: tuple[str, ...]

    @classmethod
    def of_message(cls, message: dict) -> SealedBatch:
        """From a batch message built with an ``ack_key`` (any engine): member i is the i-th
        entry of its ``members``."""
        return cls(message["batch_id"], message["group_key"], tuple(m["item_id"] for m in message["members"]))


@dataclass(frozen=True)
class Tracker:
    batch_id: str
    group_key: str
    member_count: int
    acked_count: int
    sealed_at_ms: int
    last_ack_ms: int | None
    completed_at_ms: int | None
    outbox: str  # NONE | PENDING | PUBLISHED
    published_at_ms: int | None
    completion_body: bytes | None = None  # the completion message, stored when the batch completed

    def completion(self) -> bytes:
        """The completion message's bytes: the stored ones (trackers completed before schema 10
        have none: rebuilt from the stored fields, the same bytes)."""
        if self.completion_body is not None:
            return bytes(self.completion_body)
        if self.completed_at_ms is None:
            raise ValueError(f"batch {self.batch_id} is not complete")
        return encode(build_completion(self.batch_id, self.group_key, self.member_count, self.sealed_at_ms,
                                       self.completed_at_ms))

    @property
    def complete(self) -> bool:
        return self.acked_count >= self.member_count


@dataclass
class AckResult:
    """What one ack did: members newly set, duplicates, refusals (member, reason), or the error
    that kept it from being applied at all.

    A refusal is final (retrying the same ack changes nothing: the batch is unknown, the member
    out of range, the token wrong); an ``error`` is not (the ack was not applied; retry it)."""

    batch_id: str
    newly_acked: int = 0
    duplicates: int = 0
    refused: list[tuple[int | str | None, str]] = field(default_factory=list)
    completed: Tracker | None = None  # set on the one ack that completed the batch
    error: str | None = None  # not applied: retry

    @property
    def ok(self) -> bool:
        return not self.refused and self.error is None


_TRACKER_COLUMNS = (
    "batch_id, group_key, member_count, acked_count, sealed_at_ms, last_ack_ms, completed_at_ms,"
    " outbox, published_at_ms, completion_body"
)


def _tracker(row: dict) -> Tracker:
    return Tracker(**{k: row[k] for k in Tracker.__dataclass_fields__})


def _marks(n: int) -> str:
    return ", ".join(["%s"] * n)


_BATCH_ID = re.compile(r"[0-9a-f]{32}")


def _id_literals(batch_ids: Sequence[str]) -> str:
    """Batch ids as SQL literals; refuses anything but 32 lowercase hex characters (an id
    from the database or from a validated :class:`Ack`), so no escaping is needed."""
    for batch_id in batch_ids:
        if _BATCH_ID.fullmatch(batch_id) is None:
            raise ValueError(f"not a batch id: {batch_id!r}")
    return ", ".join(f"'{b}'" for b in batch_ids)


class CompletionStore(Connection):
    def seal(self, batches: Sequence[SealedBatch], now_ms: int) -> int:
        """Create the trackers of ``batches`` and their item ids (one multi-row statement each,
        one transaction); existing ones are left alone. Returns how many were new."""
        if not batches:
            return 0
        rows = [(b.batch_id, b.group_key, len(b.item_ids), empty_bitmap(len(b.item_ids)), now_ms) for b in batches]
        with self.transaction() as cur:
            changed = cur.execute(
                "INSERT INTO completion_trackers (batch_id, group_key, member_count, acked_bits, sealed_at_ms)"
                f" VALUES {', '.join(['(%s, %s, %s, %s, %s)'] * len(rows))}"
                " ON DUPLICATE KEY UPDATE batch_id = batch_id",
                tuple(v for row in rows for v in row),
            )
            cur.execute(
                f"INSERT INTO completion_items (batch_id, item_ids) VALUES {', '.join(['(%s, %s)'] * len(rows))}"
                " ON DUPLICATE KEY UPDATE batch_id = batch_id",
                tuple(v for b in batches for v in (b.batch_id, orjson.dumps(b.item_ids).decode())),
            )
        return int(changed)

    def ack_key(self) -> bytes:
        """The secret of the ack tokens (made by migration 10). Never log it."""
        with self.transaction() as cur:
            cur.execute("SELECT ack_key FROM completion_keys WHERE id = 1")
            row = cur.fetchone()
        if row is None:
            raise StoreError("no ack key in completion_keys: run `consolidator db migrate`")
        return bytes(row["ack_key"])

    def apply_acks(self, acks: Sequence[Ack], now_ms: int) -> list[AckResult]:
        """Apply ``acks`` in one transaction; one result per ack, in order. Unknown batches,
        out-of-range indexes and unknown item ids are refused with a reason (never raised).

        A batch this call completes gets its completion message built and stored (outbox
        PENDING, attempt time ``now_ms``) in the same transaction; nothing is published here,
        so no lock is held while a sink is slow. The caller publishes
        ``result.completed.completion()`` after this returns and marks it PUBLISHED.

        Two statements in the common case (lock and read the trackers' bits, write back the
        changed ones), one more when a batch completes. Values go in as literals: batch ids
        are 32 hex characters (checked again here), bitmaps hex, counts and times integers;
        the completion bytes as parameters."""
        if not acks:
            return []
        ids = sorted({a.batch_id for a in acks})
        by_item = sorted({a.batch_id for a in acks if a.item_ids})
        results = [AckResult(a.batch_id) for a in acks]
        with self.transaction() as cur:
            cur.execute(
                "SELECT batch_id, member_count, acked_count, acked_bits, outbox FROM completion_trackers"
                f" WHERE batch_id IN ({_id_literals(ids)}) ORDER BY batch_id FOR UPDATE"
            )
            rows = {r["batch_id"]: r for r in cur.fetchall()}
            members_of = self._members_of(cur, [b for b in by_item if b in rows])
            bits = {b: r["acked_bits"] for b, r in rows.items()}
            counts = {b: r["acked_count"] for b, r in rows.items()}
            for ack, result in zip(acks, results, strict=True):
                row = rows.get(ack.batch_id)
                if row is None:
                    result.refused.append((None, UNKNOWN_BATCH))
                    continue
                if ack.item_ids and ack.batch_id not in members_of:  # lost, or a seal half-way: retry it
                    result.error = f"{NO_ITEM_LIST}: tracker {ack.batch_id} has no completion_items row"
                    continue
                size = row["member_count"]
                indexes = [i for i in ack.members if i < size]
                if len(indexes) < len(ack.members):
                    result.refused.extend((i, UNKNOWN_MEMBER) for i in ack.members if i >= size)
                for item in ack.item_ids:
                    found = members_of[ack.batch_id].get(item)
                    if found:
                        indexes.extend(found)
                    else:
                        result.refused.append((item, UNKNOWN_ITEM))
                bits[ack.batch_id], newly = set_bits(bits[ack.batch_id], indexes)
                counts[ack.batch_id] += newly
                result.newly_acked = newly
                result.duplicates = len(indexes) - newly
            changed = [b for b in ids if b in rows and counts[b] != rows[b]["acked_count"]]
            completed = [b for b in changed
                         if counts[b] >= rows[b]["member_count"] and rows[b]["outbox"] == "NONE"]
            finished: dict[str, Tracker] = {}
            if completed:
                cur.execute(f"SELECT batch_id, group_key, sealed_at_ms FROM completion_trackers"
                            f" WHERE batch_id IN ({_id_literals(completed)})")
                for r in cur.fetchall():
                    b, count = r["batch_id"], rows[r["batch_id"]]["member_count"]
                    body = encode(build_completion(b, r["group_key"], count, r["sealed_at_ms"], now_ms))
                    finished[b] = Tracker(b, r["group_key"], count, counts[b], r["sealed_at_ms"], now_ms, now_ms,
                                          "PENDING", None, body)
            if changed:
                done = _id_literals(completed) if completed else "NULL"
                cur.execute(
                    "UPDATE completion_trackers SET acked_bits = CASE batch_id"
                    + "".join(f" WHEN '{b}' THEN X'{bits[b].hex()}'" for b in changed)
                    + " END, acked_count = CASE batch_id"
                    + "".join(f" WHEN '{b}' THEN {int(counts[b])}" for b in changed)
                    + f" END, last_ack_ms = {int(now_ms)},"
                    f" completed_at_ms = IF(batch_id IN ({done}), {int(now_ms)}, completed_at_ms),"
                    f" outbox = IF(batch_id IN ({done}), 'PENDING', outbox),"
                    f" outbox_attempt_ms = IF(batch_id IN ({done}), {int(now_ms)}, outbox_attempt_ms)"
                    f" WHERE batch_id IN ({_id_literals(changed)})"
                )
            if finished:
                cur.execute(
                    "UPDATE completion_trackers SET completion_body = CASE batch_id"
                    + " WHEN %s THEN %s" * len(finished)
                    + f" END WHERE batch_id IN ({_id_literals(sorted(finished))})",
                    tuple(v for b, t in finished.items() for v in (b, t.completion_body)),
                )
        for ack, result in zip(acks, results, strict=True):  # the first ack of a batch that set a bit
            if result.newly_acked and ack.batch_id in finished:
                result.completed = finished.pop(ack.batch_id)
        return results

    @staticmethod
    def _members_of(cur, batch_ids: Sequence[str]) -> dict[str, dict[str, list[int]]]:
        """{batch id: {item id: member indexes}} of the batches whose item list exists."""
        members_of: dict[str, dict[str, list[int]]] = {}
        if batch_ids:
            cur.execute(f"SELECT batch_id, item_ids FROM completion_items WHERE batch_id IN ({_id_literals(batch_ids)})")
            for r in cur.fetchall():
                index: dict[str, list[int]] = {}
                for i, item in enumerate(orjson.loads(r["item_ids"])):
                    index.setdefault(item, []).append(i)
                members_of[r["batch_id"]] = index
        return members_of

    def tracker(self, batch_id: str) -> Tracker | None:
        with self.transaction() as cur:
            cur.execute(f"SELECT {_TRACKER_COLUMNS} FROM completion_trackers WHERE batch_id = %s", (batch_id,))
            row = cur.fetchone()
        return None if row is None else _tracker(row)

    def batch_state(self, batch_id: str) -> str | None:
        """The flush's state of the batch (CLAIMED, SENT, DEAD); None when it has no batch row."""
        with self.transaction() as cur:
            cur.execute("SELECT state FROM batches WHERE batch_id = %s", (batch_id,))
            row = cur.fetchone()
        return None if row is None else row["state"]

    def acked_members(self, batch_id: str) -> list[int] | None:
        """Indexes of the acknowledged members (None for an unknown batch)."""
        with self.transaction() as cur:
            cur.execute("SELECT member_count, acked_bits FROM completion_trackers WHERE batch_id = %s", (batch_id,))
            row = cur.fetchone()
        return None if row is None else acked_indexes(bytes(row["acked_bits"]), int(row["member_count"]))

    def lease_completions(self, now_ms: int, lease_ms: int, limit: int = 100) -> list[Tracker]:
        """PENDING completions whose last attempt is at least ``lease_ms`` old, leased to the
        caller (attempt time set to ``now_ms``; a concurrent caller skips them)."""
        with self.transaction() as cur:
            cur.execute(
                f"SELECT {_TRACKER_COLUMNS} FROM completion_trackers WHERE outbox = 'PENDING'"
                " AND outbox_attempt_ms <= %s ORDER BY outbox_attempt_ms, batch_id LIMIT %s"
                " FOR UPDATE SKIP LOCKED",
                (now_ms - lease_ms, limit),
            )
            rows = [_tracker(r) for r in cur.fetchall()]
            if rows:
                cur.execute(
                    f"UPDATE completion_trackers SET outbox_attempt_ms = %s WHERE outbox = 'PENDING'"
                    f" AND batch_id IN ({_marks(len(rows))})",
                    (now_ms, *[t.batch_id for t in rows]),
                )
        return rows

    def mark_completions_published(self, batch_ids: Sequence[str], now_ms: int) -> int:
        if not batch_ids:
            return 0
        with self.transaction() as cur:
            return int(cur.execute(
                f"UPDATE completion_trackers SET outbox = 'PUBLISHED', published_at_ms = %s"
                f" WHERE outbox = 'PENDING' AND batch_id IN ({_marks(len(batch_ids))})",
                (now_ms, *batch_ids),
            ))

    def incomplete_trackers(self, sealed_before_ms: int, limit: int = 100) -> list[Tracker]:
        """Trackers not complete, sealed before ``sealed_before_ms``, whose batch was sent (or was
        built elsewhere, by Spark: no batch row), oldest seal first."""
        with self.transaction() as cur:
            cur.execute(
                f"SELECT {', '.join('t.' + c.strip() for c in _TRACKER_COLUMNS.split(','))}"
                " FROM completion_trackers t LEFT JOIN batches b ON b.batch_id = t.batch_id"
                " WHERE t.completed_at_ms IS NULL AND t.sealed_at_ms < %s AND (b.state = 'SENT' OR b.state IS NULL)"
                " ORDER BY t.sealed_at_ms, t.batch_id LIMIT %s",
                (sealed_before_ms, limit),
            )
            return [_tracker(r) for r in cur.fetchall()]

    def incomplete_summary(self, sealed_before_ms: int) -> tuple[int, int | None]:
        """(how many, oldest seal time) of the trackers :meth:`incomplete_trackers` lists."""
        with self.transaction() as cur:
            cur.execute(
                "SELECT COUNT(*) AS n, MIN(t.sealed_at_ms) AS oldest"
                " FROM completion_trackers t LEFT JOIN batches b ON b.batch_id = t.batch_id"
                " WHERE t.completed_at_ms IS NULL AND t.sealed_at_ms < %s AND (b.state = 'SENT' OR b.state IS NULL)",
                (sealed_before_ms,),
            )
            row = cur.fetchone()
        return int(row["n"]), row["oldest"]

    def delete_trackers(self, kind: str, before_ms: int, chunk: int = 1000) -> int:
        """Delete trackers, ``chunk`` rows per transaction; returns how many. ``kind``:

        - ``finished``: completion published, sealed before ``before_ms``;
        - ``dead``: the batch is DEAD (never delivered; a redrive re-seals it on re-publish);
        - ``orphaned``: never completed, sealed before ``before_ms``."""
        where = {
            "finished": ("completion_trackers t", "t.outbox = 'PUBLISHED' AND t.sealed_at_ms < %s", (before_ms,)),
            "dead": ("completion_trackers t JOIN batches b ON b.batch_id = t.batch_id", "b.state = 'DEAD'", ()),
            "orphaned": ("completion_trackers t", "t.completed_at_ms IS NULL AND t.sealed_at_ms < %s", (before_ms,)),
        }
        if kind not in where:
            raise ValueError(f"unknown tracker kind {kind!r}")
        source, condition, args = where[kind]
        removed = 0
        while True:
            with self.transaction() as cur:
                cur.execute(
                    f"SELECT t.batch_id FROM {source} WHERE {condition} ORDER BY t.batch_id LIMIT %s FOR UPDATE",
                    (*args, chunk),
                )
                ids = [r["batch_id"] for r in cur.fetchall()]
                if ids:
                    removed += cur.execute(
                        f"DELETE FROM completion_trackers WHERE batch_id IN ({_marks(len(ids))})", tuple(ids)
                    )
                    cur.execute(f"DELETE FROM completion_items WHERE batch_id IN ({_marks(len(ids))})", tuple(ids))
            if len(ids) < chunk:
                return removed
