"""Replay protection in O(partitions): one high-water offset per (topic, partition).

Guarantees (docs/semantics.md section 4):
- a record at or below its partition's high-water mark is a replay; the mark moves in the
  same transaction as the rows it covers, so a committed mark never runs ahead of its rows;
- an ingest locks the marks of its partitions (in key order, so two ingests cannot deadlock
  on them) before it reads them: two invocations for one partition serialise on its row,
  and the second sees the first's mark;
- ``applied_positions`` is the small explicit per-position path: positions applied below the
  marks (``dlq redrive``), each exactly once. It is partitioned like the buffer, so its months
  go with the buffer's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from consolidator.rules.clock import SystemClock
from consolidator.store.connection import Connection, _string_quoter
from consolidator.store.epochs import move_epoch

Partition = tuple[str, int]  # (topic, partition)


class Mark(NamedTuple):
    """A partition's replay state. ``-1``: nothing applied yet."""

    high_water: int

    def is_replay(self, offset: int) -> bool:
        """At or below the mark."""
        return offset <= self.high_water


NO_MARK = Mark(-1)


@dataclass(frozen=True)
class PartitionOffset:
    topic: str
    partition: int
    high_water: int


def _keys(quote, partitions: Iterable[Partition]) -> str:
    return ", ".join(f"({quote(topic)},{partition:d})" for topic, partition in sorted(set(partitions)))


_MARK_COLUMNS = "SELECT src_topic, src_partition, high_water FROM partition_offsets"


def lock_read_statement(cur, partitions: list[Partition]) -> str:
    """Read and lock the existing mark rows of ``partitions`` (sorted, not empty), in key order,
    so two ingests cannot deadlock on them. A locking read sees the last committed mark, and no
    other transaction can commit a new one while we hold the row."""
    # FORCE INDEX: a scan of this small table would wait on other partitions' locked rows
    return (f"{_MARK_COLUMNS} FORCE INDEX (PRIMARY) WHERE (src_topic, src_partition)"
            f" IN ({_keys(_string_quoter(cur.connection), partitions)}) ORDER BY src_topic, src_partition FOR UPDATE")


def marks_of(rows: Iterable[tuple]) -> dict[Partition, Mark]:
    """The marks of ``lock_read_statement``'s rows (as tuples)."""
    return {(topic, partition): Mark(high) for topic, partition, high in rows}


def create_missing_marks(cur, partitions: list[Partition], marks: dict[Partition, Mark]) -> dict[Partition, Mark]:
    """``marks`` when every one of ``partitions`` has a row; else create the missing rows (the
    first ingest of a partition), lock them all and read them again. ON DUPLICATE KEY UPDATE takes
    an exclusive lock on an existing row (INSERT IGNORE would take a shared one, and two ingests
    upgrading it would deadlock); two ingests creating one row serialise on it."""
    if len(marks) == len(partitions):
        return marks
    quote = _string_quoter(cur.connection)
    cur.execute("INSERT INTO partition_offsets (src_topic, src_partition, high_water) VALUES "
                + ", ".join(f"({quote(t)},{p:d},-1)" for t, p in partitions)
                + " ON DUPLICATE KEY UPDATE high_water = high_water")
    cur.execute(lock_read_statement(cur, partitions))
    return marks_of(tuple(r.values()) for r in cur.fetchall())


def advance_marks(cur, marks: dict[Partition, int]) -> None:
    """Raise the marks of locked partitions (never lowers one)."""
    if not marks:
        return
    quote = _string_quoter(cur.connection)
    cur.execute(
        "INSERT INTO partition_offsets (src_topic, src_partition, high_water) VALUES "
        + ", ".join(f"({quote(t)},{p:d},{o:d})" for (t, p), o in sorted(marks.items()))
        + " ON DUPLICATE KEY UPDATE high_water = GREATEST(high_water, VALUES(high_water))"
    )


def record_applied(cur, positions: Iterable[tuple[bytes, int]]) -> list[bool]:
    """Insert (pos_key, bucket) into ``applied_positions``; True for each one new here. One
    statement per position: this path is for redrives only."""
    return [
        bool(cur.execute(
            f"INSERT IGNORE INTO applied_positions (pos_key, bucket) VALUES (X'{key.hex()}', {bucket:d})"))
        for key, bucket in positions
    ]


class OffsetStore(Connection):
    def replay_marks(self, partitions: Iterable[Partition]) -> dict[Partition, Mark]:
        """The committed marks of ``partitions``, without locking (a hint: ingest re-reads them
        under lock). Partitions never seen are absent."""
        rows = sorted(set(partitions))
        if not rows:
            return {}
        with self.transaction() as cur:
            cur.execute(f"{_MARK_COLUMNS} WHERE (src_topic, src_partition)"
                        f" IN ({_keys(_string_quoter(cur.connection), rows)})")
            return {(r["src_topic"], r["src_partition"]): Mark(r["high_water"]) for r in cur.fetchall()}

    def partition_offsets(self, topic: str | None = None) -> list[PartitionOffset]:
        where, args = ("WHERE src_topic = %s", (topic,)) if topic is not None else ("", ())
        with self.transaction() as cur:
            cur.execute(f"{_MARK_COLUMNS} {where} ORDER BY src_topic, src_partition", args)
            return [PartitionOffset(r["src_topic"], r["src_partition"], r["high_water"]) for r in cur.fetchall()]

    def reset_offsets(self, topic: str, partition: int | None = None, now_ms: int | None = None) -> tuple[int, int]:
        """Forget the replay state of ``topic`` (or one of its partitions): its marks and its
        applied positions, and move the topic's epoch (``store/epochs.py``) in the same
        transaction, so batches claimed from now on get ids no earlier batch has. For a recreated
        topic, whose offsets start again at 0. Returns (marks deleted, applied positions deleted)."""
        prefix = topic.encode() + b"\x00"
        if partition is not None:
            prefix += partition.to_bytes(4, "big", signed=True)
        with self.transaction() as cur:
            marks = cur.execute(
                "DELETE FROM partition_offsets WHERE src_topic = %s"
                + ("" if partition is None else " AND src_partition = %s"),
                (topic,) if partition is None else (topic, partition),
            )
            positions = cur.execute(
                "DELETE FROM applied_positions WHERE LEFT(pos_key, %s) = %s", (len(prefix), prefix))
            move_epoch(cur, topic, SystemClock().now_ms() if now_ms is None else now_ms)
        return marks, positions

    def replay_state_rows(self) -> dict[str, int]:
        """Rows that replay protection keeps: marks and explicit applied positions."""
        with self.transaction() as cur:
            cur.execute("SELECT (SELECT COUNT(*) FROM partition_offsets) AS marks,"
                        " (SELECT COUNT(*) FROM applied_positions) AS applied_positions")
            row = cur.fetchone()
            return {"marks": int(row["marks"]), "applied_positions": int(row["applied_positions"])}
