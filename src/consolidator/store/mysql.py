"""The buffer on MySQL 8.0 / Aurora MySQL 3 / MariaDB 10.11. Every SQL statement lives here.

Guarantees:
- S1: a source position already stored changes nothing (the ``ingested_positions`` ledger);
- S2: a newer event (by source position) replaces a PENDING row's items; last-update moves
  forward, first-seen never moves;
- S3/S4: ``pending_slot`` is 1 only while a row is PENDING, so the unique key allows one
  PENDING row per (bucket, group, item) and any number of CLAIMED/SENT/DEAD ones;
- rows change state only through statements that name the state they expect.

Driver errors leave this module as :class:`StoreError` or :class:`StoreUnavailable`.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

import orjson
import pymysql
import pymysql.cursors
from pymysql.constants import SERVER_STATUS
from pymysql.converters import escape_string

from consolidator.batch import Member, batch_id
from consolidator.errors import StoreError, StoreUnavailable
from consolidator.events import Event, SourcePosition, bucket_of, months_after
from consolidator.policy import FlushReason, GroupStats

# Client error codes meaning "the server is not there" rather than "this statement is wrong".
_UNAVAILABLE_CODES = {1040, 1045, 1049, 1053, 2002, 2003, 2005, 2006, 2013, 2055}
BUFFER_TABLES = ("buffer_rows", "ingested_positions")
MAXVALUE_PARTITION = "pmax"
UNSENT = ("PENDING", "CLAIMED")


@dataclass(frozen=True)
class ConnectionParams:
    host: str
    port: int = 3306
    user: str = "root"
    password: str = ""
    database: str = "consolidator"
    ssl_ca: str | None = None
    ssl: bool = False

    @classmethod
    def from_url(cls, url: str) -> ConnectionParams:
        """``mysql://user:password@host:port/database?ssl=true&ssl_ca=/path/ca.pem``"""
        parts = urlsplit(url)
        if parts.scheme != "mysql" or not parts.hostname:
            raise ValueError(f"not a mysql:// URL with a host: {url!r}")
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        return cls(
            host=parts.hostname,
            port=parts.port or 3306,
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
            database=parts.path.lstrip("/") or "consolidator",
            ssl_ca=query.get("ssl_ca"),
            ssl=query.get("ssl", "false").lower() in ("1", "true", "required") or "ssl_ca" in query,
        )

    @classmethod
    def from_secret(cls, secret: dict) -> ConnectionParams:
        """An RDS-managed secret: host, port, username, password, dbname. TLS is always on."""
        return cls(
            host=secret["host"],
            port=int(secret.get("port", 3306)),
            user=secret["username"],
            password=secret["password"],
            database=secret.get("dbname", "consolidator"),
            ssl=True,
        )


@dataclass(frozen=True)
class IngestCounts:
    stored: int = 0  # records that changed the buffer (new rows + coalesced)
    coalesced: int = 0  # of those, records folded into an existing PENDING row
    replayed: int = 0  # records whose position was already stored: no-op


@dataclass(frozen=True)
class ClaimedBatch:
    batch_id: str
    group_key: str
    reason: FlushReason
    claimed_at_ms: int
    attempts: int
    members: tuple[Member, ...]


@dataclass(frozen=True)
class PartitionInfo:
    name: str
    less_than: int | None  # None for MAXVALUE
    rows: int  # estimate from information_schema

    @property
    def holds_until_bucket(self) -> int | None:
        return None if self.less_than is None else months_after(self.less_than, -1)


def _partition_clause(first_bucket: int) -> str:
    """Initial layout: everything before ``first_bucket``, its month, and MAXVALUE."""
    return (
        f"PARTITION BY RANGE (bucket) ("
        f"PARTITION p{months_after(first_bucket, -1)} VALUES LESS THAN ({first_bucket}), "
        f"PARTITION p{first_bucket} VALUES LESS THAN ({months_after(first_bucket, 1)}), "
        f"PARTITION {MAXVALUE_PARTITION} VALUES LESS THAN MAXVALUE)"
    )


def _no_pad_collation(server_version: str) -> str:
    """Binary utf8mb4 collation that does not ignore trailing spaces ('A' <> 'A '), by server:
    utf8mb4_bin is PAD SPACE on both MariaDB and MySQL."""
    return "utf8mb4_nopad_bin" if "mariadb" in server_version.lower() else "utf8mb4_0900_bin"


def _migrations(first_bucket: int, no_pad: str) -> list[tuple[int, str, list[str]]]:
    partitions = _partition_clause(first_bucket)
    identifier = f"VARCHAR(191) CHARACTER SET utf8mb4 COLLATE {no_pad} NOT NULL"
    return [
        (
            1,
            "buffer, position ledger and batches",
            [
                f"""CREATE TABLE buffer_rows (
                  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
                  bucket INT UNSIGNED NOT NULL COMMENT 'YYYYMM of the record timestamp (UTC)',
                  group_key VARCHAR(191) NOT NULL,
                  item_id VARCHAR(191) NOT NULL,
                  status ENUM('PENDING','CLAIMED','SENT','DEAD') NOT NULL DEFAULT 'PENDING',
                  pending_slot TINYINT GENERATED ALWAYS AS (IF(status = 'PENDING', 1, NULL)) STORED,
                  pos_key VARBINARY(270) NOT NULL COMMENT 'sortable (topic, partition, offset)',
                  src_topic VARCHAR(249) NOT NULL,
                  src_partition INT NOT NULL,
                  src_offset BIGINT NOT NULL,
                  record_ts_ms BIGINT NOT NULL,
                  items MEDIUMTEXT NOT NULL COMMENT 'JSON [[sku, quantity], ...] of the newest event',
                  merged_events INT UNSIGNED NOT NULL DEFAULT 1,
                  first_seen_ms BIGINT NOT NULL,
                  last_update_ms BIGINT NOT NULL,
                  batch_id CHAR(32) NULL,
                  PRIMARY KEY (id, bucket),
                  UNIQUE KEY uq_pending_item (bucket, group_key, item_id, pending_slot),
                  KEY ix_status_group (status, group_key, first_seen_ms),
                  KEY ix_batch (batch_id)
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin {partitions}""",
                f"""CREATE TABLE ingested_positions (
                  pos_key VARBINARY(270) NOT NULL,
                  bucket INT UNSIGNED NOT NULL,
                  ingest_marker BIGINT NOT NULL COMMENT 'random per ingest call: tells new rows from replays',
                  PRIMARY KEY (pos_key, bucket)
                ) ENGINE=InnoDB {partitions}""",
                """CREATE TABLE batches (
                  batch_id CHAR(32) NOT NULL PRIMARY KEY,
                  group_key VARCHAR(191) NOT NULL,
                  state ENUM('CLAIMED','SENT','DEAD') NOT NULL,
                  flush_reason VARCHAR(16) NOT NULL,
                  member_count INT UNSIGNED NOT NULL,
                  attempts INT UNSIGNED NOT NULL DEFAULT 0,
                  claimed_at_ms BIGINT NOT NULL,
                  last_attempt_ms BIGINT NULL,
                  finished_at_ms BIGINT NULL,
                  last_error VARCHAR(1024) NULL,
                  KEY ix_state (state, claimed_at_ms)
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
            ],
        ),
        (
            2,
            "group keys and item ids compare trailing spaces",
            [
                f"ALTER TABLE buffer_rows MODIFY group_key {identifier}, MODIFY item_id {identifier}",
                f"ALTER TABLE batches MODIFY group_key {identifier}",
            ],
        ),
        (
            3,
            "fixed-width batch_id: a claim updates rows in place",
            [
                # A NULL takes no space in the row: setting the id grew every claimed row, which
                # InnoDB cannot do in place. '' means "not claimed yet".
                "UPDATE buffer_rows SET batch_id = '' WHERE batch_id IS NULL",
                "ALTER TABLE buffer_rows MODIFY batch_id CHAR(32) CHARACTER SET ascii NOT NULL DEFAULT ''",
            ],
        ),
    ]


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


def _string_quoter(connection: pymysql.connections.Connection):
    """Quote a str as an SQL literal the way the connection requires. Building multi-row VALUES
    lists directly costs a fraction of the driver's per-value formatting."""
    if connection.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES:
        return lambda text: "'" + text.replace("'", "''") + "'"
    return lambda text: "'" + escape_string(text) + "'"


def _multi_row(head: str, tail: str, rows: Iterable[str], max_bytes: int = 1_000_000) -> Iterator[str]:
    """Multi-row INSERT statements of at most ~``max_bytes`` each (under max_allowed_packet)."""
    values: list[str] = []
    size = 0
    for text in rows:
        if values and size + len(text) > max_bytes:
            yield head + ", ".join(values) + tail
            values, size = [], 0
        values.append(text)
        size += len(text) + 2
    if values:
        yield head + ", ".join(values) + tail


def _encode_items(items: Sequence[tuple[str, int]]) -> str:
    """Compact JSON ``[[sku, quantity], ...]``."""
    return orjson.dumps(items).decode()


def _member(row: dict) -> Member:
    return Member(
        position=SourcePosition(row["src_topic"], row["src_partition"], row["src_offset"]),
        item_id=row["item_id"],
        items=tuple((sku, qty) for sku, qty in orjson.loads(row["items"])),
        first_seen_ms=row["first_seen_ms"],
        last_update_ms=row["last_update_ms"],
        merged_events=row["merged_events"],
    )


class MySQLStore:
    """One connection, used by one thread at a time. Reconnects after the server went away."""

    def __init__(self, params: ConnectionParams, *, connect_timeout: int = 5, local_infile: bool = False):
        self.params = params
        self._connect_timeout = connect_timeout
        self._local_infile = local_infile
        self._connection: pymysql.connections.Connection | None = None

    @classmethod
    def from_url(cls, url: str, **kwargs) -> MySQLStore:
        return cls(ConnectionParams.from_url(url), **kwargs)

    # -- connection and error mapping ------------------------------------------------------

    def _connect(self) -> pymysql.connections.Connection:
        p = self.params
        ssl = None
        if p.ssl:
            ssl = {"ca": p.ssl_ca} if p.ssl_ca else {"check_hostname": False}
        return pymysql.connect(
            host=p.host,
            port=p.port,
            user=p.user,
            password=p.password,
            database=p.database,
            charset="utf8mb4",
            autocommit=False,
            connect_timeout=self._connect_timeout,
            read_timeout=60,
            write_timeout=60,
            ssl=ssl,
            local_infile=self._local_infile,
            init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
            cursorclass=pymysql.cursors.DictCursor,
        )

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except pymysql.err.MySQLError as exc:
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
            if isinstance(exc, pymysql.err.InterfaceError) or code in _UNAVAILABLE_CODES:
                self.close()
                raise StoreUnavailable(f"database unavailable: {exc}") from exc
            raise StoreError(f"database error: {exc}") from exc
        except OSError as exc:
            self.close()
            raise StoreUnavailable(f"database unavailable: {exc}") from exc

    @contextlib.contextmanager
    def transaction(self) -> Iterator[pymysql.cursors.DictCursor]:
        """A cursor inside one transaction: committed on success, rolled back on any error."""
        with self._errors():
            if self._connection is None or not self._connection.open:
                self._connection = self._connect()
            connection = self._connection
            try:
                with connection.cursor() as cursor:
                    yield cursor
                connection.commit()
            except BaseException:
                if connection.open:
                    try:
                        connection.rollback()
                    except pymysql.err.MySQLError:
                        connection.close()  # the original error below is what matters
                raise

    def close(self) -> None:
        if self._connection is not None and self._connection.open:
            self._connection.close()
        self._connection = None

    def ping(self) -> None:
        with self.transaction() as cur:
            cur.execute("SELECT 1")

    # -- migrations --------------------------------------------------------------------------

    def migrate(self, now_ms: int) -> list[int]:
        """Apply the migrations not applied yet, in order. Returns the versions applied now."""
        with self.transaction() as cur:
            cur.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version INT NOT NULL PRIMARY KEY, description VARCHAR(255) NOT NULL,"
                " applied_at_ms BIGINT NOT NULL) ENGINE=InnoDB"
            )
            cur.execute("SELECT version FROM schema_migrations ORDER BY version")
            done = {row["version"] for row in cur.fetchall()}
            cur.execute("SELECT VERSION() AS v")
            no_pad = _no_pad_collation(cur.fetchone()["v"])
        applied = []
        for version, description, statements in _migrations(bucket_of(now_ms), no_pad):
            if version in done:
                continue
            with self.transaction() as cur:
                # MySQL DDL commits implicitly: a failure half-way leaves the version unrecorded
                # and the next run stops at the first existing table with a clear error.
                for statement in statements:
                    cur.execute(statement)
                cur.execute(
                    "INSERT INTO schema_migrations (version, description, applied_at_ms) VALUES (%s, %s, %s)",
                    (version, description, now_ms),
                )
            applied.append(version)
        return applied

    def schema_version(self) -> int:
        with self.transaction() as cur:
            cur.execute("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations")
            return int(cur.fetchone()["v"])

    # -- ingest ------------------------------------------------------------------------------

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

    # -- flush -------------------------------------------------------------------------------

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

    def claim(self, group_key: str, reason: FlushReason, limit: int, now_ms: int) -> ClaimedBatch | None:
        """Claim up to ``limit`` PENDING rows of the group, oldest first, under one batch id
        derived from their positions. Rows locked by a concurrent claimer are skipped; if any
        chosen row changed state meanwhile, nothing is claimed (B: one id per claim)."""
        with self.transaction() as cur:
            cur.execute(
                "SELECT id, bucket, src_topic, src_partition, src_offset, item_id, items,"
                " first_seen_ms, last_update_ms, merged_events FROM buffer_rows"
                " WHERE status = 'PENDING' AND group_key = %s"
                " ORDER BY first_seen_ms, pos_key LIMIT %s FOR UPDATE SKIP LOCKED",
                (group_key, limit),
            )
            rows = cur.fetchall()
            if not rows:
                return None
            members = tuple(_member(r) for r in rows)
            new_id = batch_id(group_key, (m.position for m in members))
            pairs = [(r["id"], r["bucket"]) for r in rows]
            updated = cur.execute(
                "UPDATE buffer_rows SET status = 'CLAIMED', batch_id = %s WHERE status = 'PENDING'"
                f" AND (id, bucket) IN ({', '.join(['(%s, %s)'] * len(pairs))})",
                (new_id, *[v for pair in pairs for v in pair]),
            )
            if updated != len(rows):
                raise StoreError(f"claim of {group_key!r} raced: {updated} of {len(rows)} rows still PENDING")
            cur.execute(
                "INSERT INTO batches (batch_id, group_key, state, flush_reason, member_count, claimed_at_ms)"
                " VALUES (%s, %s, 'CLAIMED', %s, %s, %s)",
                (new_id, group_key, str(reason), len(rows), now_ms),
            )
        return ClaimedBatch(new_id, group_key, reason, now_ms, 0, members)

    def claimed_batch_ids(self, limit: int) -> list[str]:
        """CLAIMED batches, oldest claim first."""
        with self.transaction() as cur:
            cur.execute(
                "SELECT batch_id FROM batches WHERE state = 'CLAIMED'"
                " ORDER BY claimed_at_ms, batch_id LIMIT %s",
                (limit,),
            )
            return [r["batch_id"] for r in cur.fetchall()]

    def load_batch(self, batch_id_: str, *, state: str = "CLAIMED") -> ClaimedBatch | None:
        """The batch and its member rows, if it is in ``state``."""
        with self.transaction() as cur:
            cur.execute(
                "SELECT group_key, flush_reason, claimed_at_ms, attempts FROM batches"
                " WHERE batch_id = %s AND state = %s",
                (batch_id_, state),
            )
            head = cur.fetchone()
            if head is None:
                return None
            cur.execute(
                "SELECT src_topic, src_partition, src_offset, item_id, items, first_seen_ms,"
                " last_update_ms, merged_events FROM buffer_rows WHERE batch_id = %s AND status = %s"
                " ORDER BY first_seen_ms, pos_key",
                (batch_id_, "DEAD" if state == "DEAD" else state),
            )
            members = tuple(_member(r) for r in cur.fetchall())
        return ClaimedBatch(
            batch_id_, head["group_key"], FlushReason(head["flush_reason"]), head["claimed_at_ms"],
            head["attempts"], members,
        )

    def start_attempt(self, batch_id_: str, now_ms: int) -> int | None:
        """Count a publish attempt of a CLAIMED batch; returns the attempt number (None if not CLAIMED)."""
        with self.transaction() as cur:
            changed = cur.execute(
                "UPDATE batches SET attempts = attempts + 1, last_attempt_ms = %s"
                " WHERE batch_id = %s AND state = 'CLAIMED'",
                (now_ms, batch_id_),
            )
            if not changed:
                return None
            cur.execute("SELECT attempts FROM batches WHERE batch_id = %s", (batch_id_,))
            return int(cur.fetchone()["attempts"])

    def record_failure(self, batch_id_: str, error: str) -> None:
        with self.transaction() as cur:
            cur.execute(
                "UPDATE batches SET last_error = %s WHERE batch_id = %s AND state = 'CLAIMED'",
                (error[:1024], batch_id_),
            )

    def mark_sent(self, batch_id_: str, now_ms: int) -> bool:
        """CLAIMED -> SENT for the batch and its rows; False when it was not CLAIMED any more."""
        return self._finish(batch_id_, "SENT", now_ms, None)

    def mark_dead(self, batch_id_: str, now_ms: int, error: str) -> bool:
        """CLAIMED -> DEAD for the batch and its rows (after the dead-letter write succeeded)."""
        return self._finish(batch_id_, "DEAD", now_ms, error)

    def _finish(self, batch_id_: str, state: str, now_ms: int, error: str | None) -> bool:
        with self.transaction() as cur:
            changed = cur.execute(
                "UPDATE batches SET state = %s, finished_at_ms = %s, last_error = COALESCE(%s, last_error)"
                " WHERE batch_id = %s AND state = 'CLAIMED'",
                (state, now_ms, None if error is None else error[:1024], batch_id_),
            )
            if changed:
                cur.execute(
                    "UPDATE buffer_rows SET status = %s WHERE batch_id = %s AND status = 'CLAIMED'",
                    (state, batch_id_),
                )
        return bool(changed)

    def start_attempts(self, batch_ids: Sequence[str], now_ms: int) -> dict[str, int]:
        """:meth:`start_attempt` for several batches in one transaction: attempt numbers of
        those still CLAIMED (the others are absent from the result)."""
        if not batch_ids:
            return {}
        marks = ", ".join(["%s"] * len(batch_ids))
        with self.transaction() as cur:
            cur.execute(
                "UPDATE batches SET attempts = attempts + 1, last_attempt_ms = %s"
                f" WHERE state = 'CLAIMED' AND batch_id IN ({marks})",
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
        CLAIMED and are now SENT (the others were finished elsewhere and are left alone)."""
        if not batch_ids:
            return set()
        marks = ", ".join(["%s"] * len(batch_ids))
        with self.transaction() as cur:
            cur.execute(
                f"SELECT batch_id FROM batches WHERE state = 'CLAIMED' AND batch_id IN ({marks})"
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
                cur.execute(
                    f"UPDATE buffer_rows SET status = 'SENT' WHERE status = 'CLAIMED' AND batch_id IN ({marks})",
                    tuple(claimed),
                )
        return set(claimed)

    def revive_dead_batch(self, batch_id_: str) -> bool:
        """DEAD -> CLAIMED with attempts reset, so the next flush tick re-publishes it under
        the same batch id (dead-letter redrive)."""
        with self.transaction() as cur:
            changed = cur.execute(
                "UPDATE batches SET state = 'CLAIMED', attempts = 0, finished_at_ms = NULL"
                " WHERE batch_id = %s AND state = 'DEAD'",
                (batch_id_,),
            )
            if changed:
                cur.execute(
                    "UPDATE buffer_rows SET status = 'CLAIMED' WHERE batch_id = %s AND status = 'DEAD'",
                    (batch_id_,),
                )
        return bool(changed)

    def batch_counts(self) -> dict[str, int]:
        with self.transaction() as cur:
            cur.execute("SELECT state, COUNT(*) AS n FROM batches GROUP BY state ORDER BY state")
            return {r["state"]: int(r["n"]) for r in cur.fetchall()}

    def batches_in_state(self, state: str, limit: int = 100) -> list[dict]:
        with self.transaction() as cur:
            cur.execute(
                "SELECT batch_id, group_key, flush_reason, member_count, attempts, claimed_at_ms,"
                " finished_at_ms, last_error FROM batches WHERE state = %s"
                " ORDER BY claimed_at_ms, batch_id LIMIT %s",
                (state, limit),
            )
            return list(cur.fetchall())

    # -- partitions --------------------------------------------------------------------------

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
        with self.transaction() as cur:
            cur.execute(
                f"SELECT COUNT(*) AS n FROM buffer_rows PARTITION ({_partition_name(name)})"
                " WHERE status IN ('PENDING', 'CLAIMED')"
            )
            return int(cur.fetchone()["n"])

    def drop_partition_if_sent(self, name: str) -> int:
        """Drop partition ``name`` of the buffer and the ledger unless a row in it is PENDING or
        CLAIMED. Returns the number of unsent rows that blocked the drop (0 = dropped).
        The tables are write-locked between the check and the drop, so no row slips in."""
        name = _partition_name(name)
        if name == MAXVALUE_PARTITION:
            raise StoreError("the MAXVALUE partition is never dropped")
        with self._errors():
            if self._connection is None or not self._connection.open:
                self._connection = self._connect()
            connection = self._connection
            with connection.cursor() as cur:
                cur.execute("LOCK TABLES buffer_rows WRITE, ingested_positions WRITE")
                try:
                    cur.execute(
                        f"SELECT COUNT(*) AS n FROM buffer_rows PARTITION ({name})"
                        " WHERE status IN ('PENDING', 'CLAIMED')"
                    )
                    unsent = int(cur.fetchone()["n"])
                    if unsent == 0:
                        for table in BUFFER_TABLES:
                            cur.execute(f"ALTER TABLE {table} DROP PARTITION {name}")
                finally:
                    cur.execute("UNLOCK TABLES")
            connection.commit()
        return unsent

    # -- operator views ----------------------------------------------------------------------

    def row_counts(self) -> dict[str, int]:
        with self.transaction() as cur:
            cur.execute("SELECT status, COUNT(*) AS n FROM buffer_rows GROUP BY status ORDER BY status")
            return {r["status"]: int(r["n"]) for r in cur.fetchall()}


def _partition_name(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise StoreError(f"not a partition name: {name!r}")
    return name


def recreate_database(params: ConnectionParams) -> None:
    """Drop and create ``params.database`` (empty, utf8mb4_bin): for throwaway databases such
    as the local demo's. Never point this at a database that holds anything you need."""
    try:
        connection = pymysql.connect(
            host=params.host, port=params.port, user=params.user, password=params.password,
            connect_timeout=5, autocommit=True,
        )
    except pymysql.err.MySQLError as exc:
        raise StoreUnavailable(f"database unavailable: {exc}") from exc
    name = params.database
    if not name.replace("_", "").isalnum():
        raise StoreError(f"not a plain database name: {name!r}")
    try:
        with connection.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    except pymysql.err.MySQLError as exc:
        raise StoreError(f"could not recreate database {name!r}: {exc}") from exc
    finally:
        connection.close()
