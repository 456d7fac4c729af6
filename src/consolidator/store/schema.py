"""Schema: versioned, idempotent migrations of the buffer, the replay state and batches.

The migration floor: ``consolidator db migrate`` (:meth:`SchemaStore.migrate`) brings a database
of any older version to :data:`SCHEMA_VERSION`, and the runtime refuses an older one
(``open_store``, :class:`~consolidator.rules.errors.SchemaOutdated`). So the code outside the migrations
reads only the current schema. What stays from older schemas is data, never a code path: ids
already assigned never change (a batch claimed before schema 9 keeps its v1 id, stored as its
``batch_id``, ``id_epochs`` NULL; a re-publish sends the stored id); migration 13 retires the
pre-v4 per-record ledger, after which the marks alone decide every replay. It refuses
(:class:`~consolidator.rules.errors.LedgerNotDrained`, nothing written) while a partition's old
ledger has a gap at or below its ``ledger_high_water``, a record Kafka may still re-deliver,
unless the operator confirms the ledger drained (``db migrate --ledger-drained``).
"""

from __future__ import annotations

import secrets

from consolidator.rules.errors import LedgerNotDrained
from consolidator.rules.events import bucket_of, months_after
from consolidator.store.connection import Connection
from consolidator.store.databases import refuse_system_schema
from consolidator.store.partitions import MAXVALUE_PARTITION


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


Statement = str | tuple[str, tuple]  # SQL, or SQL and its parameters

#: The version this code reads and writes: the last migration's (a test holds them equal).
SCHEMA_VERSION = 13
LEDGER_RETIRED = 13  # the migration that retires the pre-v4 ledger: checked before it runs


def _migrations(first_bucket: int, no_pad: str, now_ms: int = 0) -> list[tuple[int, str, list[Statement]]]:
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
        (
            4,
            "replay protection by per-partition high-water offsets instead of a per-record ledger",
            [
                f"""CREATE TABLE partition_offsets (
                  src_topic {identifier.replace("VARCHAR(191)", "VARCHAR(249)")},
                  src_partition INT NOT NULL,
                  high_water BIGINT NOT NULL COMMENT 'highest offset applied or dead-lettered: at or below is a replay',
                  ledger_high_water BIGINT NULL COMMENT 'highest offset of the pre-v4 ledger: at or below, applied_positions decides',
                  PRIMARY KEY (src_topic, src_partition)
                ) ENGINE=InnoDB""",
                # pos_key is topic, 0x00, partition (4 bytes) and offset (8 bytes), big-endian.
                # The ledger's gaps may be records Lambda will still re-deliver (failed ones): the
                # ledger's rows stay, as applied_positions, to decide those exactly.
                f"""INSERT INTO partition_offsets (src_topic, src_partition, high_water, ledger_high_water)
                SELECT t, p, MAX(o), MAX(o) FROM (
                  SELECT CONVERT(LEFT(pos_key, LENGTH(pos_key) - 13) USING utf8mb4) COLLATE {no_pad} AS t,
                         CAST(CONV(HEX(SUBSTRING(pos_key, LENGTH(pos_key) - 11, 4)), 16, 10) AS SIGNED) AS p,
                         CAST(CONV(HEX(RIGHT(pos_key, 8)), 16, 10) AS SIGNED) AS o
                  FROM ingested_positions) AS ledger
                GROUP BY t, p""",
                "RENAME TABLE ingested_positions TO applied_positions",
                "ALTER TABLE applied_positions DROP COLUMN ingest_marker",
            ],
        ),
        (
            5,
            "per-group rate limit and event time-to-live",
            [
                # EXPIRED is appended to the enums: a metadata-only change on both servers.
                ("ALTER TABLE buffer_rows MODIFY status ENUM('PENDING','CLAIMED','SENT','DEAD','EXPIRED')"
                " NOT NULL DEFAULT 'PENDING'"),
                ("ALTER TABLE batches MODIFY state ENUM('CLAIMED','SENT','DEAD','EXPIRED') NOT NULL,"
                " ADD COLUMN kind ENUM('batch','expiry') NOT NULL DEFAULT 'batch'"
                " COMMENT 'expiry: rows over the TTL on their way to the dead-letter destination',"
                " ADD COLUMN held_back_ms BIGINT NOT NULL DEFAULT 0"
                " COMMENT 'how long the rate limit held the group back before this claim'"),
                f"""CREATE TABLE group_rate_limits (
                  group_key {identifier} PRIMARY KEY,
                  batches INT UNSIGNED NOT NULL,
                  period_ms BIGINT NOT NULL,
                  updated_at_ms BIGINT NOT NULL
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
                f"""CREATE TABLE group_rate_state (
                  group_key {identifier} PRIMARY KEY,
                  recent_ms TEXT NOT NULL COMMENT 'claim times inside the window, ascending, comma-separated',
                  throttled_since_ms BIGINT NULL COMMENT 'first refusal since the last claim',
                  throttled_until_ms BIGINT NULL COMMENT 'next allowed claim, as of the last refusal',
                  updated_at_ms BIGINT NOT NULL
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
            ],
        ),
        (
            6,
            "batch completion trackers: a bit per member, the completion outbox",
            [
                f"""CREATE TABLE completion_trackers (
                  batch_id CHAR(32) CHARACTER SET ascii NOT NULL PRIMARY KEY,
                  group_key {identifier},
                  member_count INT UNSIGNED NOT NULL,
                  acked_count INT UNSIGNED NOT NULL DEFAULT 0,
                  acked_bits BLOB NOT NULL COMMENT 'bit i (byte i DIV 8, bit i MOD 8) set = member i acknowledged',
                  sealed_at_ms BIGINT NOT NULL,
                  last_ack_ms BIGINT NULL,
                  completed_at_ms BIGINT NULL COMMENT 'when the last distinct member was acknowledged',
                  outbox ENUM('NONE','PENDING','PUBLISHED') NOT NULL DEFAULT 'NONE'
                    COMMENT 'the completion message: not due, due, confirmed by the sink',
                  outbox_attempt_ms BIGINT NULL COMMENT 'last publish attempt: a lease against double publishing',
                  published_at_ms BIGINT NULL,
                  KEY ix_open (completed_at_ms, sealed_at_ms),
                  KEY ix_outbox (outbox, outbox_attempt_ms)
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
                # Apart from the trackers: every ack rewrites its tracker row, which stays small
                # (the item ids of a 500-member batch are kilobytes; read only for acks by item id).
                """CREATE TABLE completion_items (
                  batch_id CHAR(32) CHARACTER SET ascii NOT NULL PRIMARY KEY,
                  item_ids MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL
                    COMMENT 'JSON list: the item id of member i'
                ) ENGINE=InnoDB""",
            ],
        ),
        (
            7,
            "a claimed row's state lives on its batch: one row write per flush",
            [
                # From now on the claim is a row's last write: SENT and DEAD are set on the batch
                # only, and a CLAIMED row is in its batch's state. Rows already SENT stay SENT
                # (terminal); the few DEAD rows become CLAIMED (their batch is DEAD, so they still
                # read DEAD) so that a redrive, which revives the batch alone, revives them too.
                "UPDATE buffer_rows SET status = 'CLAIMED' WHERE status = 'DEAD'",
            ],
        ),
        (
            8,
            "a batch row holds its members' keys: the claim moves one index entry per row",
            [
                # Readers go from a batch to its rows by primary key (store/members.py), so the
                # claim no longer moves an ix_batch entry per row. Keys are filled in for the
                # batches that may still be read (CLAIMED, DEAD); SENT and EXPIRED ones are final.
                ("ALTER TABLE batches ADD COLUMN member_keys MEDIUMTEXT CHARACTER SET ascii NULL"
                 " COMMENT 'JSON [[id, bucket], ...] of the member rows in batch order; NULL: claimed before schema 8'"),
                "SET SESSION group_concat_max_len = 4294967295",  # MySQL's default (1,024) cuts a 50-member list
                """UPDATE batches b SET member_keys = COALESCE((
                  SELECT CONCAT('[', GROUP_CONCAT(CONCAT('[', r.id, ',', r.bucket, ']')
                                                  ORDER BY r.first_seen_ms, r.pos_key SEPARATOR ','), ']')
                  FROM buffer_rows r WHERE r.batch_id = CONVERT(b.batch_id USING ascii) AND r.status = 'CLAIMED'
                ), '[]')  -- '[]': the rows' partition was dropped
                WHERE b.state IN ('CLAIMED', 'DEAD')""",
                "ALTER TABLE buffer_rows DROP INDEX ix_batch",
            ],
        ),
        (
            9,
            "topic epochs: a batch id names its topics' epochs, so a recreated topic's claims get new ids",
            [
                # ``consolidator offsets reset`` moves a topic's epoch; a topic without a row is at 0.
                """CREATE TABLE topic_epochs (
                  src_topic VARCHAR(249) NOT NULL PRIMARY KEY,
                  epoch INT UNSIGNED NOT NULL,
                  moved_at_ms BIGINT NOT NULL
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
                # NULL: claimed before schema 9, its id is the v1 formula (ids already assigned stay)
                ("ALTER TABLE batches ADD COLUMN id_epochs TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL"
                 " COMMENT 'JSON {topic: epoch} the batch id was computed with (topics at 0 left out);"
                 " NULL: a v1 id, claimed before schema 9'"),
            ],
        ),
        (
            10,
            "completion outbox bytes, and the ack key that proves an ack comes from a batch's recipient",
            [
                # The completion message is built once, in the transaction that completes the
                # batch, and every publish (first, sweep, any re-publish) sends these bytes.
                ("ALTER TABLE completion_trackers ADD COLUMN completion_body MEDIUMBLOB NULL"
                 " COMMENT 'the completion message, stored with the last ack; NULL: not complete'"),
                """CREATE TABLE completion_keys (
                  id TINYINT UNSIGNED NOT NULL PRIMARY KEY,
                  ack_key VARBINARY(64) NOT NULL COMMENT 'HMAC key of the batches'' ack tokens: a secret',
                  created_at_ms BIGINT NOT NULL
                ) ENGINE=InnoDB""",
                # Random, made here (not by SQL), passed as a parameter: never in a statement's text.
                ("INSERT INTO completion_keys (id, ack_key, created_at_ms) VALUES (1, %s, %s)",
                 (secrets.token_bytes(32), now_ms)),
            ],
        ),
        (
            11,
            "every batch row holds its members' keys: the migration floor",
            [
                # Batches migration 8 left without keys (SENT and EXPIRED ones then, and any a
                # version before schema 8 claimed while it rolled out) get them, from one pass
                # over the rows of those batches, in batch order; then the column is NOT NULL, so
                # no reader needs the by-batch-id path any more. Ids do not change.
                "SET SESSION group_concat_max_len = 4294967295",
                """UPDATE batches b JOIN (
                  SELECT r.batch_id, CONCAT('[', GROUP_CONCAT(CONCAT('[', r.id, ',', r.bucket, ']')
                                                              ORDER BY r.first_seen_ms, r.pos_key SEPARATOR ','), ']') AS k
                  FROM buffer_rows r
                  WHERE r.batch_id IN (SELECT CONVERT(batch_id USING ascii) FROM batches WHERE member_keys IS NULL)
                  GROUP BY r.batch_id) AS m ON CONVERT(b.batch_id USING ascii) = m.batch_id
                SET b.member_keys = m.k WHERE b.member_keys IS NULL""",
                "UPDATE batches SET member_keys = '[]' WHERE member_keys IS NULL",  # the rows' partition was dropped
                ("ALTER TABLE batches MODIFY member_keys MEDIUMTEXT CHARACTER SET ascii NOT NULL"
                 " COMMENT 'JSON [[id, bucket], ...] of the member rows in batch order'"),
            ],
        ),
        (
            12,
            "a buffer row keeps the W3C trace context of its newest event",
            [
                # Set with the row's items (the newest position's); NULL: that record had none.
                ("ALTER TABLE buffer_rows"
                 " ADD COLUMN trace_parent CHAR(55) CHARACTER SET ascii NULL"
                 " COMMENT 'traceparent header of the newest event; NULL: none or not valid',"
                 " ADD COLUMN trace_state VARCHAR(512) CHARACTER SET ascii NULL"
                 " COMMENT 'tracestate header beside it; NULL: none'"),
            ],
        ),
        (
            LEDGER_RETIRED,
            "the pre-v4 ledger retired: the high-water marks alone decide replays",
            [
                # Runs once no partition's old ledger can still decide a record (checked first,
                # undrained_ledger). Its rows stay in applied_positions: positions applied, as
                # redriven ones are, and they go with their months.
                "ALTER TABLE partition_offsets DROP COLUMN ledger_high_water",
            ],
        ),
    ]


def undrained_ledger(cur) -> list[str]:
    """The partitions whose pre-v4 ledger may still decide a record, each as a line for the
    operator: between the lowest position the ledger still holds and ``ledger_high_water`` an
    offset is missing (a record that failed, which Kafka may re-deliver; or an offset Kafka never
    used: a transaction marker, a compacted record). A partition whose ledger holds every offset
    of that range, or none any more (its months dropped), has nothing left to decide."""
    cur.execute("SELECT src_topic, src_partition, ledger_high_water FROM partition_offsets"
                " WHERE ledger_high_water IS NOT NULL ORDER BY src_topic, src_partition")
    lines = []
    for row in cur.fetchall():
        topic, partition, high = row["src_topic"], row["src_partition"], row["ledger_high_water"]
        prefix = topic.encode() + b"\x00" + partition.to_bytes(4, "big", signed=True)
        cur.execute("SELECT COUNT(DISTINCT pos_key) AS held, MIN(pos_key) AS lowest FROM applied_positions"
                    " WHERE pos_key BETWEEN %s AND %s", (prefix + bytes(8), prefix + high.to_bytes(8, "big")))
        found = cur.fetchone()
        if not found["held"]:
            continue
        lowest = int.from_bytes(found["lowest"][-8:], "big")
        missing = high - lowest + 1 - int(found["held"])
        if missing:
            lines.append(f"{topic!r} partition {partition}: {missing} offset(s) between {lowest} and {high}"
                         " not in the ledger")
    return lines


class SchemaStore(Connection):
    def migrate(self, now_ms: int, ledger_drained: bool = False) -> list[int]:
        """Apply the migrations not applied yet, in order. Returns the versions applied now.
        A system schema of the server (``mysql``, ``sys``, ...) is refused before anything is written.
        Before the migration that retires the pre-v4 ledger, :func:`undrained_ledger` must be
        empty, or ``ledger_drained`` given (the operator checked that Kafka will not deliver
        again any record at or below those partitions' ``ledger_high_water``): else
        :class:`~consolidator.rules.errors.LedgerNotDrained`, the migrations before it applied."""
        with self.transaction() as cur:
            cur.execute("SELECT DATABASE() AS name")
            refuse_system_schema(cur.fetchone()["name"] or "", "migrate")
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
        for version, description, statements in _migrations(bucket_of(now_ms), no_pad, now_ms):
            if version in done:
                continue
            with self.transaction() as cur:
                if version == LEDGER_RETIRED and not ledger_drained and (undrained := undrained_ledger(cur)):
                    raise LedgerNotDrained(
                        "the pre-v4 ledger may still decide re-delivered records of "
                        + "; ".join(undrained) + ". Once the consumer group's committed offset of each partition is past that"
                        " highest offset (`kafka-consumer-groups --describe --group GROUP`), Kafka will not"
                        " deliver them again: then run `consolidator db migrate --ledger-drained`"
                        " (docs/guide/operations.md)")
                # MySQL DDL commits implicitly: a failure half-way leaves the version unrecorded
                # and the next run stops at the first existing table with a clear error.
                for statement in statements:
                    sql, args = statement if isinstance(statement, tuple) else (statement, None)
                    cur.execute(sql, args)
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
