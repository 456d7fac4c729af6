"""Monthly RANGE partitions of the buffer and its applied positions: add ahead, drop only when sent.
A row is unsent while it is PENDING, or CLAIMED under a batch that is still CLAIMED. The
``batches`` rows whose member rows went with their partitions are pruned after them."""

from __future__ import annotations

from dataclasses import dataclass

from consolidator.rules.errors import StoreError
from consolidator.rules.events import months_after
from consolidator.store.connection import Connection
from consolidator.store.members import keys_table

BUFFER_TABLES = ("buffer_rows", "applied_positions")
MAXVALUE_PARTITION = "pmax"


@dataclass(frozen=True)
class PartitionInfo:
    name: str
    less_than: int | None  # None for MAXVALUE
    rows: int  # estimate from information_schema

    @property
    def holds_until_bucket(self) -> int | None:
        return None if self.less_than is None else months_after(self.less_than, -1)


class PartitionStore(Connection):
    def partitions(self, table: str = "buffer_rows") -> list[PartitionInfo]:
        with self.transaction() as cur:
            cur.execute(
                "SELECT PARTITION_NAME AS name, PARTITION_DESCRIPTION AS bound, TABLE_ROWS AS n"
                " FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s"
                " ORDER BY PARTITION_ORDINAL_POSITION",
                (table,),
            )
            return [
                PartitionInfo(
                    r["name"], None if r["bound"] == "MAXVALUE" else int(r["bound"]), int(r["n"] or 0)
                )
                for r in cur.fetchall()
            ]

    def add_partitions_through(self, last_bucket: int) -> list[str]:
        """Split MAXVALUE so that every month up to ``last_bucket`` has its own partition.
        Returns the partitions created (empty when they already exist)."""
        created: list[str] = []
        for table in BUFFER_TABLES:
            bounded = [p for p in self.partitions(table) if p.less_than is not None]
            bucket = bounded[-1].less_than if bounded else last_bucket
            new = []
            while bucket <= last_bucket:
                new.append(f"PARTITION p{bucket} VALUES LESS THAN ({months_after(bucket, 1)})")
                bucket = months_after(bucket, 1)
            if not new:
                continue
            with self.transaction() as cur:
                cur.execute(
                    f"ALTER TABLE {table} REORGANIZE PARTITION {MAXVALUE_PARTITION} INTO ("
                    + ", ".join(new)
                    + f", PARTITION {MAXVALUE_PARTITION} VALUES LESS THAN MAXVALUE)"
                )
            if table == BUFFER_TABLES[0]:
                created = [n.split()[1] for n in new]
        return created

    def unsent_rows_in_partition(self, name: str) -> int:
        """Rows of partition ``name`` that are PENDING, or CLAIMED under a batch still CLAIMED."""
        with self.transaction() as cur:
            return _unsent(cur, _partition_name(name))

    def drop_partition_if_sent(self, name: str) -> int:
        """Drop partition ``name`` of the buffer and applied positions unless a row in it is unsent
        (PENDING, or CLAIMED under a batch still CLAIMED). Returns the number of unsent rows that
        blocked the drop (0 = dropped). The buffer is write-locked and ``batches`` read-locked
        between the check and the drop, so no row slips in and no batch is revived meanwhile."""
        name = _partition_name(name)
        if name == MAXVALUE_PARTITION:
            raise StoreError("the MAXVALUE partition is never dropped")
        with self._errors():
            if self._connection is None or not self._connection.open:
                self._connection = self._connect()
            connection = self._connection
            with connection.cursor() as cur:
                cur.execute("LOCK TABLES buffer_rows WRITE, applied_positions WRITE, batches READ")
                try:
                    unsent = _unsent(cur, name)
                    if unsent == 0:
                        for table in BUFFER_TABLES:
                            cur.execute(f"ALTER TABLE {table} DROP PARTITION {name}")
                finally:
                    cur.execute("UNLOCK TABLES")
            connection.commit()
        return unsent


    def prune_batches(self, claimed_before_ms: int, chunk: int = 1000) -> int:
        """Delete the ``batches`` rows whose member rows are all gone with their partitions:
        claimed before ``claimed_before_ms``, not CLAIMED, and no member row left (so a DEAD
        batch with live rows, which a redrive can revive, stays). ``chunk`` rows per
        transaction; returns how many."""
        removed = 0
        while True:
            with self.transaction() as cur:
                cur.execute(
                    "SELECT b.batch_id FROM batches b"
                    " WHERE b.state <> 'CLAIMED' AND b.claimed_at_ms < %s"
                    f" AND NOT EXISTS (SELECT 1 FROM {keys_table('b')}"
                    "   JOIN buffer_rows r ON r.id = k.id AND r.bucket = k.bucket)"
                    " ORDER BY b.claimed_at_ms, b.batch_id LIMIT %s FOR UPDATE",
                    (claimed_before_ms, chunk),
                )
                ids = [r["batch_id"] for r in cur.fetchall()]
                if ids:
                    marks = ", ".join(["%s"] * len(ids))
                    removed += cur.execute(
                        f"DELETE FROM batches WHERE batch_id IN ({marks}) AND state <> 'CLAIMED'", tuple(ids))
            if len(ids) < chunk:
                return removed


def _unsent(cur, name: str) -> int:
    """The unsent rows of partition ``name``: its PENDING rows (by the status index), and the
    CLAIMED rows of the batches still CLAIMED (few), found from those batches by primary key, so
    the partition's sent rows (CLAIMED rows of SENT batches) are never read. One statement per
    count: under LOCK TABLES a statement may name a table only once."""
    counts = []
    for statement in (
        f"SELECT COUNT(*) AS n FROM buffer_rows PARTITION ({name}) WHERE status = 'PENDING'",
        (f"SELECT COUNT(*) AS n FROM batches JOIN {keys_table()} STRAIGHT_JOIN buffer_rows PARTITION ({name})"
         " ON buffer_rows.id = k.id AND buffer_rows.bucket = k.bucket"
         " WHERE batches.state = 'CLAIMED' AND buffer_rows.status = 'CLAIMED'"),
    ):
        cur.execute(statement)
        counts.append(int(cur.fetchone()["n"]))
    return sum(counts)


def _partition_name(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise StoreError(f"not a partition name: {name!r}")
    return name
