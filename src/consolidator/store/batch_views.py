"""Read-only views of batches for operators (``consolidator batch show`` and ``batch list``).

Every batch row is shown in its own state (CLAIMED, SENT, DEAD, or EXPIRED for an expiry
record), tracked or not; its members are read by primary key from the batch row
(``store/members.py``), whatever their status, so a sent batch shows the rows it took. Reads
only: no statement here writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from consolidator.rules.events import SourcePosition
from consolidator.rules.shape import EventView, stored_items
from consolidator.store.connection import Connection
from consolidator.store.members import member_condition

STATES = ("CLAIMED", "SENT", "DEAD", "EXPIRED")
_HEAD = ("batch_id, group_key, state, kind, flush_reason, member_count, attempts, claimed_at_ms, last_attempt_ms,"
         " finished_at_ms, last_error, held_back_ms")


@dataclass(frozen=True)
class BatchMember:
    """One member row: position, item id, and what its row keeps of the newest event (``event``
    under a generic shape, else the (sku, quantity) ``items``)."""

    position: SourcePosition
    item_id: str
    merged_events: int
    first_seen_ms: int
    last_update_ms: int
    event: object = None
    items: tuple[tuple[str, int], ...] | None = None


@dataclass(frozen=True)
class BatchView:
    batch_id: str
    group_key: str
    state: str
    kind: str  # batch | expiry
    reason: str
    member_count: int
    failed_publishes: int  # the ``attempts`` column: publishes that failed
    claimed_at_ms: int
    last_attempt_ms: int | None
    finished_at_ms: int | None
    last_error: str | None
    held_back_ms: int
    tracked: bool  # sealed for completion tracking
    members: tuple[BatchMember, ...] = ()

    @property
    def attempts(self) -> int:
        """Publishes tried: the failed ones, and the one that succeeded for a SENT batch (a batch
        published at its first attempt has 1, as ``flush`` printed ``attempt=1``)."""
        return self.failed_publishes + (self.state == "SENT" and self.kind == "batch")


def _view(row: dict, tracked: bool, members: Sequence[BatchMember] = ()) -> BatchView:
    return BatchView(row["batch_id"], row["group_key"], row["state"], row["kind"], row["flush_reason"],
                     int(row["member_count"]), int(row["attempts"]), int(row["claimed_at_ms"]),
                     row["last_attempt_ms"], row["finished_at_ms"], row["last_error"], int(row["held_back_ms"]),
                     tracked, tuple(members))


def _member(row: dict) -> BatchMember:
    kept = stored_items(row["items"])
    position = SourcePosition(row["src_topic"], int(row["src_partition"]), int(row["src_offset"]))
    common = (position, row["item_id"], int(row["merged_events"]), int(row["first_seen_ms"]), int(row["last_update_ms"]))
    if isinstance(kept, EventView):
        return BatchMember(*common, event=kept.event)
    return BatchMember(*common, items=kept)


def _members(cur, batch_id: str, member_keys) -> list[BatchMember]:
    condition, args = member_condition(batch_id, member_keys)
    cur.execute("SELECT src_topic, src_partition, src_offset, item_id, items, merged_events, first_seen_ms,"
                f" last_update_ms FROM buffer_rows WHERE {condition} ORDER BY first_seen_ms, pos_key", args)
    return [_member(r) for r in cur.fetchall()]


class BatchViews(Connection):
    """Operator reads of the ``batches`` table (mixed into the store next to :class:`BatchStore`)."""

    def batch_view(self, batch_id: str) -> BatchView | None:
        """The batch and its members in batch order; None when no batch has this id."""
        with self.transaction() as cur:
            cur.execute(f"SELECT {_HEAD}, member_keys FROM batches WHERE batch_id = %s", (batch_id,))
            row = cur.fetchone()
            if row is None:
                return None
            cur.execute("SELECT COUNT(*) AS n FROM completion_trackers WHERE batch_id = %s", (batch_id,))
            tracked = bool(cur.fetchone()["n"])
            members = _members(cur, batch_id, row["member_keys"])
        return _view(row, tracked, members)

    def batch_views(self, *, state: str | None = None, group_key: str | None = None, since_ms: int | None = None,
                    limit: int = 100, members: bool = False) -> list[BatchView]:
        """Batches newest first, filtered by state, group and claim time (at or after ``since_ms``),
        at most ``limit``; with their members when ``members`` (one more read per batch)."""
        if state is not None and state not in STATES:
            raise ValueError(f"state must be one of {', '.join(STATES)}, got {state!r}")
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        where, args = [], []
        for clause, value in (("state = %s", state), ("group_key = %s", group_key), ("claimed_at_ms >= %s", since_ms)):
            if value is not None:
                where.append(clause)
                args.append(value)
        condition = f"WHERE {' AND '.join(where)}" if where else ""
        with self.transaction() as cur:
            cur.execute(f"SELECT {_HEAD}, member_keys, EXISTS(SELECT 1 FROM completion_trackers t"
                        " WHERE t.batch_id = CONVERT(b.batch_id USING ascii))"
                        f" AS tracked FROM batches b {condition} ORDER BY claimed_at_ms DESC, batch_id LIMIT %s",
                        (*args, limit))
            rows = cur.fetchall()
            return [_view(r, bool(r["tracked"]), _members(cur, r["batch_id"], r["member_keys"]) if members else ())
                    for r in rows]


@dataclass(frozen=True)
class CarrierRow:
    """A buffer row that holds an event, and the batch that took it (``batch_id`` empty while
    the row is PENDING): what ``consolidator batch find`` shows."""

    group_key: str
    item_id: str
    position: SourcePosition  # the row's newest event
    status: str  # the row's: PENDING, CLAIMED, SENT, DEAD or EXPIRED
    merged_events: int
    first_seen_ms: int
    last_update_ms: int
    batch_id: str
    batch_state: str | None  # the batch's (None: no batch, or its row was pruned)
    claimed_at_ms: int | None
    finished_at_ms: int | None  # when it was published (SENT) or given up (DEAD)


_CARRIER = ("SELECT r.group_key, r.item_id, r.src_topic, r.src_partition, r.src_offset, r.status, r.merged_events,"
            " r.first_seen_ms, r.last_update_ms, r.batch_id, b.state AS batch_state, b.claimed_at_ms,"
            " b.finished_at_ms FROM buffer_rows r LEFT JOIN batches b ON r.batch_id <> '' AND b.batch_id = r.batch_id")


def _carrier(row: dict) -> CarrierRow:
    return CarrierRow(row["group_key"], row["item_id"],
                      SourcePosition(row["src_topic"], int(row["src_partition"]), int(row["src_offset"])),
                      row["status"], int(row["merged_events"]), int(row["first_seen_ms"]), int(row["last_update_ms"]),
                      row["batch_id"] or "", row["batch_state"], row["claimed_at_ms"], row["finished_at_ms"])


class EventFinder(Connection):
    """Which row, and which batch, holds an event (``consolidator batch find``). Reads only.

    Neither a position nor an item id is indexed in ``buffer_rows`` (ingest stays lean), so each
    lookup scans the table: an operator's question, not a hot path."""

    def rows_at_position(self, position: SourcePosition) -> list[CarrierRow]:
        """The rows whose newest event is at ``position`` (one, or none when a newer event of the
        same item replaced it, or its month's partition was dropped)."""
        with self.transaction() as cur:
            cur.execute(f"{_CARRIER} WHERE r.pos_key = %s", (position.sort_key(),))
            return [_carrier(r) for r in cur.fetchall()]

    def rows_of_item(self, item_id: str, limit: int) -> list[CarrierRow]:
        """The rows of item ``item_id`` (any group, month and state), the newest event first, at
        most ``limit``."""
        with self.transaction() as cur:
            cur.execute(f"{_CARRIER} WHERE r.item_id = %s ORDER BY r.last_update_ms DESC, r.pos_key DESC LIMIT %s",
                        (item_id, limit))
            return [_carrier(r) for r in cur.fetchall()]
