"""Replay protection by per-partition high-water offsets (docs/semantics.md section 4) on real MariaDB:
O(partitions) state, replays after a send, poison marks, concurrent invocations, redrive,
the migration from the per-record ledger, and ``consolidator offsets reset``."""

from __future__ import annotations

import threading
import time

import boto3
import pymysql
import pytest
from moto import mock_aws
from support import T0, record, sql

from consolidator.rules.errors import LedgerNotDrained
from consolidator.rules.events import FieldNames, decode
from consolidator.rules.policy import FlushReason
from consolidator.services.ingest import IngestService
from consolidator.services.redrive import redrive_poison
from consolidator.sinks.deadletter import FileDeadLetter, SqsDeadLetter
from consolidator.store import schema
from consolidator.store.mysql import ConnectionParams, MySQLStore

ROWS = "SELECT * FROM buffer_rows ORDER BY id"
MARKS = "SELECT src_topic, src_partition, high_water FROM partition_offsets ORDER BY src_topic, src_partition"


@pytest.fixture
def dead_letter(tmp_path) -> FileDeadLetter:
    return FileDeadLetter(tmp_path / "dead-letter.jsonl")


@pytest.fixture
def service(store, dead_letter, clock) -> IngestService:
    return IngestService(store, dead_letter, FieldNames(), 256 * 1024, clock)


def marks(store) -> dict[int, int]:
    return {m["src_partition"]: m["high_water"] for m in sql(store, MARKS)}


def test_replay_state_is_one_row_per_partition(service, store):
    records = [record(o // 3, partition=o % 3, order=f"O{o}") for o in range(3_000)]
    for start in range(0, len(records), 500):
        assert service.ingest(records[start:start + 500]).failed == []
    assert store.replay_state_rows() == {"marks": 3, "applied_positions": 0}
    assert marks(store) == {0: 999, 1: 999, 2: 999}
    assert sql(store, "SELECT COUNT(*) AS n FROM buffer_rows")[0]["n"] == 3_000


def test_replay_after_the_row_was_sent_changes_nothing(service, store, clock):
    service.ingest([record(1, order="A"), record(2, order="B")])
    batch = store.claim("WH-42", FlushReason.IDLE, 500, clock.now_ms())
    assert store.mark_sent(batch.batch_id, clock.now_ms())
    before = sql(store, ROWS), sql(store, MARKS)
    clock.advance(5_000)
    outcome = service.ingest([record(1, order="A"), record(2, order="B", items=(("CHANGED", 1),))])
    assert (outcome.stored, outcome.replayed) == (0, 2)
    assert (sql(store, ROWS), sql(store, MARKS)) == before  # no new PENDING row (S3 would start one)


def test_records_of_one_invocation_at_or_below_an_earlier_one_are_replays(service, store):
    outcome = service.ingest([record(5, order="A"), record(6, order="B"), record(5, order="A")])
    assert (outcome.stored, outcome.replayed) == (2, 1)
    assert sql(store, "SELECT SUM(merged_events) AS n FROM buffer_rows")[0]["n"] == 2


@mock_aws
def test_poison_moves_the_mark_only_once_dead_lettered_and_is_not_dead_lettered_again(store, clock, dead_letter):
    sqs = boto3.client("sqs", region_name="eu-west-1")
    missing = SqsDeadLetter("https://sqs.eu-west-1.amazonaws.com/123456789012/missing", client=sqs)
    records = [record(1, order="A"), record(2, value=b"{bad"), record(3, order="C")]
    down = IngestService(store, missing, FieldNames(), 256 * 1024, clock)
    assert [p.offset for p in down.ingest(records).failed] == [2, 3]
    assert marks(store) == {0: 1}

    up = IngestService(store, dead_letter, FieldNames(), 256 * 1024, clock)
    outcome = up.ingest(records[1:])  # Lambda resumes the partition at offset 2
    assert (outcome.failed, outcome.dead_lettered, outcome.stored) == ([], 1, 1)
    assert marks(store) == {0: 3}
    again = up.ingest(records)  # a replay of all three: nothing is written anywhere
    assert (again.failed, again.dead_lettered, again.stored, again.replayed) == ([], 0, 0, 3)
    assert [e["source"]["offset"] for e in dead_letter.read()] == [2]


def test_a_poison_record_alone_advances_the_mark(service, store, dead_letter):
    assert service.ingest([record(7, value=b"[]")]).dead_lettered == 1
    assert marks(store) == {0: 7}


def _hold_mark_row(database_url: str, partition: int) -> pymysql.connections.Connection:
    params = ConnectionParams.from_url(database_url)
    other = pymysql.connect(host=params.host, port=params.port, user=params.user, password=params.password,
                            database=params.database, autocommit=False)
    with other.cursor() as cur:
        cur.execute("SELECT high_water FROM partition_offsets WHERE src_topic = 'orders' AND src_partition = %s"
                    " FOR UPDATE", (partition,))
    return other


def test_a_second_invocation_for_the_partition_waits_for_the_first_and_sees_its_mark(service, store, database_url):
    """A timed-out invocation still running while Lambda retries: both cannot apply a record."""
    service.ingest([record(1, order="A")])
    first = _hold_mark_row(database_url, 0)  # the first invocation holds the partition's row
    result = {}
    retry = threading.Thread(target=lambda: result.update(outcome=service.ingest(
        [record(2, order="B"), record(3, order="C"), record(4, order="D")])))
    retry.start()
    time.sleep(1.0)
    assert retry.is_alive(), "the retry did not wait for the partition's row"
    with first.cursor() as cur:  # the first invocation applies offsets 2 and 3, then commits
        cur.execute("INSERT INTO buffer_rows (bucket, group_key, item_id, pos_key, src_topic, src_partition,"
                    " src_offset, record_ts_ms, items, first_seen_ms, last_update_ms)"
                    " SELECT bucket, group_key, 'FIRST', pos_key, src_topic, src_partition, 3, record_ts_ms, items,"
                    " first_seen_ms, last_update_ms FROM buffer_rows WHERE item_id = 'A'")
        cur.execute("UPDATE partition_offsets SET high_water = 3 WHERE src_topic = 'orders' AND src_partition = 0")
    first.commit()
    first.close()
    retry.join(30)
    outcome = result["outcome"]
    assert (outcome.failed, outcome.stored, outcome.replayed) == ([], 1, 2)
    assert [r["item_id"] for r in sql(store, ROWS)] == ["A", "FIRST", "D"]
    assert marks(store) == {0: 4}


def test_concurrent_invocations_of_the_same_records_apply_each_once(database_url, clock, dead_letter):
    records = [record(o, partition=o % 2, order=f"O{o % 40}") for o in range(400)]
    stores = [MySQLStore(ConnectionParams.from_url(database_url)) for _ in range(3)]
    stores[0].migrate(clock.now_ms())
    services = [IngestService(s, dead_letter, FieldNames(), 256 * 1024, clock) for s in stores]
    outcomes = []
    threads = [threading.Thread(target=lambda s=s: outcomes.append(s.ingest(records))) for s in services]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(o.failed == [] for o in outcomes)
    assert sum(o.stored for o in outcomes) == 400 and sum(o.replayed for o in outcomes) == 800
    assert sql(stores[0], "SELECT SUM(merged_events) AS n FROM buffer_rows")[0]["n"] == 400
    for s in stores:
        s.close()


def test_redrive_applies_fixed_poison_under_its_position_exactly_once(service, store, dead_letter):
    service.ingest([record(1, order="A"), record(2, value=b'{"location_id": "WH-42"}'), record(3, order="C")])
    assert marks(store) == {0: 3}
    [entry] = dead_letter.read()
    entry["value"] = {"location_id": "WH-42", "order_id": "FIXED", "items": []}
    first = redrive_poison([entry], service)
    second = redrive_poison([entry], service)
    assert (first.stored, first.replayed, second.stored, second.replayed) == (1, 0, 0, 1)
    assert sorted((r["src_offset"], r["item_id"]) for r in sql(store, ROWS)) == [(1, "A"), (2, "FIXED"), (3, "C")]
    assert marks(store) == {0: 3}
    assert store.replay_state_rows() == {"marks": 1, "applied_positions": 1}


def _ledger_row(store, topic: str, partition: int, offset: int) -> None:
    from consolidator.rules.events import SourcePosition

    sql(store, "INSERT INTO ingested_positions (pos_key, bucket, ingest_marker) VALUES (%s, 202611, 1)",
        (SourcePosition(topic, partition, offset).sort_key(),))


def test_migration_retires_the_ledger_only_once_it_is_drained(database_url, clock, dead_letter, monkeypatch):
    """A v3 database whose ledger has a gap (offset 3 of partition 1 failed and Lambda may
    re-deliver it): migration 4 derives the marks, migration 13 refuses to retire the ledger
    (nothing written) until the operator confirms it drained; then the marks alone decide."""
    store = MySQLStore(ConnectionParams.from_url(database_url))
    every = schema._migrations
    monkeypatch.setattr(schema, "_migrations", lambda *args: every(*args)[:3])
    assert store.migrate(T0) == [1, 2, 3]
    applied = {0: [1, 2, 3], 1: [1, 2, 4, 5]}
    for partition, offsets in applied.items():
        for offset in offsets:
            _ledger_row(store, "orders", partition, offset)
    _ledger_row(store, "other.topic-with-dash", 7, 2**40)
    monkeypatch.setattr(schema, "_migrations", every)
    with pytest.raises(LedgerNotDrained) as refused:
        store.migrate(T0)
    assert "'orders' partition 1: 1 offset(s) between 1 and 5 not in the ledger" in str(refused.value)
    assert "partition 0" not in str(refused.value) and "other.topic" not in str(refused.value)
    assert store.schema_version() == schema.LEDGER_RETIRED - 1  # the migrations before it applied
    assert sql(store, "SHOW TABLES LIKE 'ingested_positions'") == []
    assert [(m["src_topic"], m["src_partition"], m["high_water"], m["ledger_high_water"])
            for m in sql(store, MARKS.replace("high_water", "high_water, ledger_high_water"))] == [
        ("orders", 0, 3, 3), ("orders", 1, 5, 5), ("other.topic-with-dash", 7, 2**40, 2**40)]

    assert store.migrate(T0, ledger_drained=True) == [13]
    assert [tuple(m.values()) for m in sql(store, MARKS)] == [
        ("orders", 0, 3), ("orders", 1, 5), ("other.topic-with-dash", 7, 2**40)]
    service = IngestService(store, dead_letter, FieldNames(), 256 * 1024, clock)
    redelivered = [record(o, partition=1, order=f"P1-{o}") for o in range(1, 8)]
    outcome = service.ingest(redelivered)
    assert (outcome.failed, outcome.stored, outcome.replayed) == ([], 2, 5)  # 6, 7: the marks decide
    assert sorted(r["src_offset"] for r in sql(store, ROWS)) == [6, 7]
    assert marks(store)[1] == 7
    store.close()


def test_a_drained_ledger_retires_without_asking(database_url, monkeypatch):
    """No gap between a partition's lowest ledger position and its highest: migration 13 runs
    at once, and the ledger's rows stay as applied positions."""
    store = MySQLStore(ConnectionParams.from_url(database_url))
    every = schema._migrations
    monkeypatch.setattr(schema, "_migrations", lambda *args: every(*args)[:3])
    assert store.migrate(T0) == [1, 2, 3]
    for offset in (7, 8, 9):
        _ledger_row(store, "orders", 0, offset)
    monkeypatch.setattr(schema, "_migrations", every)
    assert store.migrate(T0)[-1] == schema.SCHEMA_VERSION
    assert store.replay_state_rows() == {"marks": 1, "applied_positions": 3}
    assert store.replay_marks([("orders", 0)])[("orders", 0)].high_water == 9
    store.close()


def test_offsets_reset_asks_then_lets_a_recreated_topic_start_again(service, store, database_url, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from consolidator.cli import app

    monkeypatch.setenv("CONSOLIDATOR_DATABASE_URL", database_url)
    monkeypatch.setenv("CONSOLIDATOR_DEAD_LETTER_URL", f"file://{tmp_path / 'dl.jsonl'}")
    service.ingest([record(o, order=f"O{o}") for o in range(5)])
    runner = CliRunner()
    refused = runner.invoke(app, ["offsets", "reset", "orders"], input="n\n")
    assert refused.exit_code == 1 and marks(store) == {0: 4}
    listed = runner.invoke(app, ["offsets", "list", "--json"])
    assert '"high_water": 4' in listed.stdout
    done = runner.invoke(app, ["offsets", "reset", "orders"], input="y\n")
    assert done.exit_code == 0, done.stdout + done.stderr
    assert marks(store) == {}
    recreated = [record(o, order=f"NEW{o}") for o in range(2)]  # offsets start at 0 again
    assert service.ingest(recreated).stored == 2
    assert runner.invoke(app, ["offsets", "reset", "nosuch", "--yes"]).exit_code == 1


def test_decoded_events_keep_their_bucket(store):
    """The upsert computes the bucket from the record timestamp, as Event.bucket does."""
    event = decode(record(1, timestamp_ms=1_798_761_599_999), FieldNames(), 1024)
    store.ingest([event], T0)
    assert sql(store, "SELECT bucket FROM buffer_rows") == [{"bucket": event.bucket}] == [{"bucket": 202612}]
