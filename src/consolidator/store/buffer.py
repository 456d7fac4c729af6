"""Ingest into the buffer (S1-S4) and the views of PENDING rows.

Guarantees:
- S1: a source position already stored changes nothing (the ``ingested_positions`` ledger);
- S2: a newer event (by source position) replaces a PENDING row's items; last-update moves
  forward, first-seen never moves;
- S3/S4: ``pending_slot`` is 1 only while a row is PENDING, so the unique key allows one
  PENDING row per (bucket, group, item) and any number of CLAIMED/SENT/DEAD ones.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from consolidator.events import Event
from consolidator.policy import GroupStats
from consolidator.store.connection import Connection, _multi_row, _string_quoter


@dataclass(frozen=True)
class IngestCounts:
    stored: int = 0  # records that changed the buffer (new rows + coalesced)
    coalesced: int = 0  # of those, records folded into an existing PENDING row
    replayed: int = 0  # records whose position was already stored: no-op


_UPSERT_HEAD = """
INSERT INTO buffer_rows
  (bucket, group_key, item_id, pos_key, src_topic, src_partition, src_offset, record_ts_ms,
   items, first_seen_ms, last_update_ms)
VALUES """
_UPSERT_TAIL = """
ON DUPLICATE KEY UPDATE
  merged_events = merged_events + 1,
  items = IF(VALUES(pos_key) > pos_key, VALUES(items), items),
  record_ts_ms = IF(VALUES(pos_key) > pos_key, VALUES(record_ts_ms), record_ts_ms),
  src_topic = IF(VALUES(pos_key) > pos_key, VALUES(src_topic), src_topic),
  src_partition = IF(VALUES(pos_key) > pos_key, VALUES(src_partition), src_partition),
  src_offset = IF(VALUES(pos_key) > pos_key, VALUES(src_offset), src_offset),
  last_update_ms = GREATEST(last_update_ms, VALUES(last_update_ms)),
  pos_key = GREATEST(pos_key, VALUES(pos_key))
"""
# ON DUPLICATE KEY UPDATE assigns left to right: pos_key is compared by every line above
# and changed last. merged_events always changes, so each duplicate counts 2 affected rows.


def _encode_items(items: Sequence[tuple[str, int]]) -> str:
    """Compact JSON ``[[sku, quantity], ...]``."""
    return orjson.dumps(items).decode()


class BufferStore(Connection):
    def ingest(self, events: Sequence[Event], now_ms: int) -> IngestCounts:
        """Store ``events`` in one transaction (S1-S4). All or nothing."""
        if not events:
            return IngestCounts()
        unique: dict[bytes, Event] = {}
        for event in events:
            unique.setdefault(event.position.sort_key(), event)
        with self.transaction() as cur:
            quote = _string_quoter(cur.connection)
            # The ledger insert detects replays itself: a stored position is ignored, so the
            # common case (no replay) costs no lookup. Rows it added carry this call's marker.
            marker = secrets.randbits(62)
            recorded = sum(
                cur.execute(statement)
                for statement in _multi_row(
                    "INSERT IGNORE INTO ingested_positions (pos_key, bucket, ingest_marker) VALUES ", "",
                    (f"(X'{key.hex()}',{e.bucket},{marker})" for key, e in unique.items()),
                )
            )
            fresh = list(unique.items())
            if recorded != len(unique):
                keys = ", ".join(f"X'{key.hex()}'" for key in unique)
                cur.execute(
                    f"SELECT pos_key FROM ingested_positions WHERE pos_key IN ({keys}) AND ingest_marker <> %s",
                    (marker,),
                )
                seen = {bytes(row["pos_key"]) for row in cur.fetchall()}
                fresh = [(key, event) for key, event in fresh if key not in seen]
            affected = 0
            for statement in _multi_row(_UPSERT_HEAD, _UPSERT_TAIL, (
                f"({e.bucket},{quote(e.group_key)},{quote(e.item_id)},X'{key.hex()}',"
                f"{quote(e.position.topic)},{e.position.partition:d},{e.position.offset:d},{e.timestamp_ms:d},"
                f"{quote(_encode_items(e.items))},{now_ms:d},{now_ms:d})"
                for key, e in fresh
            )):
                affected += cur.execute(statement)
        return IngestCounts(
            stored=len(fresh), coalesced=affected - len(fresh),
            replayed=len(events) - len(fresh),
        )

    def pending_group_stats(self, group_key: str | None = None) -> list[GroupStats]:
        """Statistics of PENDING rows per group (one group when ``group_key`` is given)."""
        where, args = ("AND group_key = %s", (group_key,)) if group_key is not None else ("", ())
        with self.transaction() as cur:
            cur.execute(
                "SELECT group_key, COUNT(*) AS pending, MIN(first_seen_ms) AS oldest,"
                " MAX(last_update_ms) AS newest FROM buffer_rows"
                f" WHERE status = 'PENDING' {where} GROUP BY group_key ORDER BY group_key",
                args,
            )
            return [
                GroupStats(r["group_key"], int(r["pending"]), int(r["oldest"]), int(r["newest"]))
                for r in cur.fetchall()
            ]

    def row_counts(self) -> dict[str, int]:
        with self.transaction() as cur:
            cur.execute("SELECT status, COUNT(*) AS n FROM buffer_rows GROUP BY status ORDER BY status")
            return {r["status"]: int(r["n"]) for r in cur.fetchall()}
