"""One row write per flush: a claimed row's state lives on its batch (schema 7).

The claim is the only write of a buffer row; SENT and DEAD are written on the batch row, and a
CLAIMED row is in its batch's state. Every reader (row counts, the cleanup guard, redrive, the
flush's re-publish) reads that effective state; a database from before it keeps its rows.
"""

from __future__ import annotations

import hashlib
import json

import pytest
from support import ROWS, STATE, T0, record, sql
from test_cleanup import FEB_2027, ingest_october
from test_flush import POLICY, RecordingSink, assert_invariants, ingest, make_service, orders
from test_flush_crash import Crash, CrashingStore

from consolidator.rules.errors import StoreError
from consolidator.rules.events import FieldNames, SourcePosition, bucket_of, decode
from consolidator.rules.policy import FlushReason
from consolidator.services.cleanup import CleanupService
from consolidator.store import schema
from consolidator.store.mysql import ConnectionParams, MySQLStore


def raw_statuses(store) -> dict[str, int]:
    return {r["status"]: r["n"] for r in sql(store, "SELECT status, COUNT(*) AS n FROM buffer_rows GROUP BY status")}


def test_a_flushed_row_is_written_once_and_reads_sent_through_its_batch(store, clock, tmp_path):
    ingest(store, clock, orders(30, groups=3))
    clock.advance(POLICY.debounce_ms)
    sink = RecordingSink(tmp_path / "out.jsonl")
    assert len(make_service(store, sink, clock, tmp_path).tick().published) == 3

    assert raw_statuses(store) == {"CLAIMED": 30}, "the mark wrote the rows again"
    assert store.row_counts() == {"SENT": 30} and store.batch_counts() == {"SENT": 3}
    effective = sql(store, f"SELECT {STATE} AS state, COUNT(*) AS n FROM {ROWS} GROUP BY 1")
    assert effective == [{"state": "SENT", "n": 30}]
    assert_invariants(store, sink.messages(), 30)


def test_crash_after_publish_leaves_rows_effectively_claimed_and_unsent(store, clock, tmp_path):
    """Published, then the flusher died before the batch was marked: its rows still count as
    CLAIMED and unsent (the cleanup guard sees them); the next tick re-publishes the same id."""
    ingest(store, clock, orders(10, groups=1))
    clock.advance(POLICY.debounce_ms)
    sink = RecordingSink(tmp_path / "out.jsonl")
    crashing = CrashingStore(store.params, "after_publish")
    with pytest.raises(Crash):
        make_service(crashing, sink, clock, tmp_path).tick()
    crashing.close()
    (published,) = sink.messages()
    partition = f"p{bucket_of(T0)}"
    assert store.row_counts() == {"CLAIMED": 10}
    assert store.unsent_rows_in_partition(partition) == 10

    clock.advance(POLICY.tick_interval_ms)
    report = make_service(store, sink, clock, tmp_path).tick()
    assert [b.batch_id for b in report.published] == [published["batch_id"]]
    assert sink.messages() == [published, published], "re-published under the same id, same bytes"
    assert store.row_counts() == {"SENT": 10} and raw_statuses(store) == {"CLAIMED": 10}
    assert store.unsent_rows_in_partition(partition) == 0


def test_cleanup_drops_a_partition_only_when_no_row_in_it_has_a_claimed_batch(store, clock):
    ingest_october(store, 1, "A001")
    ingest_october(store, 2, "A002")
    sent = store.claim("WH-42", FlushReason.IDLE, 1, T0)
    assert store.mark_sent(sent.batch_id, T0)
    dead = store.claim("WH-42", FlushReason.IDLE, 1, T0)
    assert store.mark_dead(dead.batch_id, T0, "sink down")
    ingest_october(store, 3, "A003")
    in_flight = store.claim("WH-42", FlushReason.IDLE, 1, T0)
    assert raw_statuses(store) == {"CLAIMED": 3}
    assert store.row_counts() == {"CLAIMED": 1, "DEAD": 1, "SENT": 1}

    clock.set(FEB_2027)
    service = CleanupService(store, clock, retention_months=3, partitions_ahead=1)
    report = service.run()
    assert report.dropped == [] and [(r.partition, r.unsent_rows) for r in report.refused] == [("p202610", 1)]
    assert store.unsent_rows_in_partition("p202610") == 1
    assert store.mark_sent(in_flight.batch_id, T0)  # the batch row only: its row stays CLAIMED
    assert raw_statuses(store) == {"CLAIMED": 3}
    assert service.run().dropped == ["p202610"], "rows of SENT and DEAD batches do not block"


def v1_batch_id(group_key: str, positions) -> str:
    """The id versions before schema 9 gave a batch (the code computes none this way any more)."""
    lines = "".join(f"{p.topic}\t{p.partition}\t{p.offset}\n" for p in sorted(positions))
    return hashlib.sha256(f"consolidator-batch-v1\n{group_key}\n{lines}".encode()).hexdigest()[:32]


def write_rows_as_before(store, events) -> None:
    """Rows as versions before the trace context (schema 12) wrote them: one PENDING row per
    event, the columns those versions had (today's ingest writes columns they lack)."""
    for e in events:
        sql(store, "INSERT INTO buffer_rows (bucket, group_key, item_id, pos_key, src_topic, src_partition,"
                   " src_offset, record_ts_ms, items, first_seen_ms, last_update_ms)"
                   " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (e.bucket, e.group_key, e.item_id, e.position.sort_key(), *e.position, e.timestamp_ms,
             json.dumps(e.items), T0, T0))


def claim_as_before_schema_8(store, size: int, group_key: str = "WH-42") -> str:
    """Claim the group's oldest PENDING rows as versions 1-7 did: the rows carry the batch id,
    the batch row has no member keys, and the id is the v1 formula (no epochs: ``id_epochs`` NULL).
    Returns the batch id."""
    rows = sql(store, "SELECT id, src_topic, src_partition, src_offset FROM buffer_rows WHERE status = 'PENDING'"
                      " AND group_key = %s ORDER BY first_seen_ms, pos_key LIMIT %s", (group_key, size))
    claimed = v1_batch_id(group_key, [SourcePosition(r["src_topic"], r["src_partition"], r["src_offset"]) for r in rows])
    sql(store, f"UPDATE buffer_rows SET status = 'CLAIMED', batch_id = %s WHERE id IN ({','.join(['%s'] * len(rows))})",
        (claimed, *[r["id"] for r in rows]))
    sql(store, "INSERT INTO batches (batch_id, group_key, state, flush_reason, member_count, claimed_at_ms)"
               " VALUES (%s, %s, 'CLAIMED', 'idle', %s, %s)", (claimed, group_key, len(rows), T0))
    return claimed


def test_migration_7_keeps_the_states_of_a_version_6_database(database_url, clock, monkeypatch, tmp_path):
    """Rows SENT and DEAD as version 6 wrote them (row and batch), a CLAIMED batch and a PENDING
    row: after migration 7 every row reads as before, the DEAD batch revives with its rows, and
    the flush finishes the CLAIMED ones under their ids."""
    store = MySQLStore(ConnectionParams.from_url(database_url))
    every = schema._migrations
    monkeypatch.setattr(schema, "_migrations", lambda *args: every(*args)[:6])
    assert store.migrate(T0) == [1, 2, 3, 4, 5, 6]
    events = [decode(record(i, order=f"A{i}"), FieldNames(), 1024) for i in range(1, 8)]
    write_rows_as_before(store, events)
    ids = {}
    for state, size in (("SENT", 2), ("DEAD", 2), ("CLAIMED", 2)):
        ids[state] = claim_as_before_schema_8(store, size)
        if state != "CLAIMED":  # as version 6 finished a batch: the batch row and its rows
            sql(store, "UPDATE batches SET state = %s WHERE batch_id = %s", (state, ids[state]))
            sql(store, "UPDATE buffer_rows SET status = %s WHERE batch_id = %s", (state, ids[state]))
    before = {"CLAIMED": 2, "DEAD": 2, "PENDING": 1, "SENT": 2}
    assert raw_statuses(store) == before

    monkeypatch.setattr(schema, "_migrations", every)
    assert store.migrate(T0) == [7, 8, 9, 10, 11, 12, 13]
    assert store.row_counts() == before
    assert raw_statuses(store) == {"CLAIMED": 4, "PENDING": 1, "SENT": 2}, "SENT rows stay SENT; DEAD rows follow their batch"

    assert store.revive_dead_batch(ids["DEAD"])
    assert store.row_counts() == {"CLAIMED": 4, "PENDING": 1, "SENT": 2}
    sink = RecordingSink(tmp_path / "out.jsonl")
    clock.advance(POLICY.debounce_ms)
    report = make_service(store, sink, clock, tmp_path).tick()
    republished = {b.batch_id: b.size for b in report.published}
    assert republished[ids["DEAD"]] == 2 and republished[ids["CLAIMED"]] == 2
    assert store.row_counts() == {"SENT": 7}
    assert sql(store, "SELECT COUNT(*) AS n FROM buffer_rows WHERE status = 'SENT'") == [{"n": 2}]
    store.close()



def test_migration_8_keys_the_batches_still_read_and_drops_ix_batch(database_url, clock, monkeypatch, tmp_path):
    """Batches claimed by version 7 (found through ix_batch): after migration 8 the CLAIMED and
    DEAD ones carry their member keys, in batch order (a DEAD one whose rows are gone an empty
    list), and after migration 11 the SENT ones too; every reader gives what it gave before,
    without the index."""
    store = MySQLStore(ConnectionParams.from_url(database_url))
    every = schema._migrations
    monkeypatch.setattr(schema, "_migrations", lambda *args: every(*args)[:7])
    assert store.migrate(T0) == [1, 2, 3, 4, 5, 6, 7]
    write_rows_as_before(store, [decode(record(i, order=f"A{i}"), FieldNames(), 1024) for i in range(1, 9)])
    ids = {state: claim_as_before_schema_8(store, size) for state, size in (("SENT", 2), ("DEAD", 2), ("CLAIMED", 3))}
    sql(store, "UPDATE batches SET state = 'SENT' WHERE batch_id = %s", (ids["SENT"],))
    sql(store, "UPDATE batches SET state = 'DEAD' WHERE batch_id = %s", (ids["DEAD"],))
    sql(store, "INSERT INTO batches (batch_id, group_key, state, flush_reason, member_count, claimed_at_ms)"
               " VALUES (%s, 'WH-42', 'DEAD', 'idle', 1, %s)", ("f" * 32, T0))  # its partition was dropped
    partition = f"p{bucket_of(T0)}"

    monkeypatch.setattr(schema, "_migrations", every)
    assert store.migrate(T0) == [8, 9, 10, 11, 12, 13]
    keys = {r["batch_id"]: r["member_keys"] for r in sql(store, "SELECT batch_id, member_keys FROM batches")}
    assert keys["f" * 32] == "[]"
    for state in ("SENT", "DEAD", "CLAIMED"):
        rows = sql(store, "SELECT id, bucket FROM buffer_rows WHERE batch_id = %s ORDER BY first_seen_ms, pos_key",
                   (ids[state],))
        assert json.loads(keys[ids[state]]) == [[r["id"], r["bucket"]] for r in rows]
    assert "ix_batch" not in {r["Key_name"] for r in sql(store, "SHOW INDEX FROM buffer_rows")}
    assert store.row_counts() == {"CLAIMED": 3, "DEAD": 2, "PENDING": 1, "SENT": 2}
    assert store.unsent_rows_in_partition(partition) == 4  # the CLAIMED batch's rows and the PENDING one
    assert [m.position.offset for m in store.load_batch(ids["CLAIMED"]).members] == [5, 6, 7]

    assert store.revive_dead_batch(ids["DEAD"])
    clock.advance(POLICY.debounce_ms)
    report = make_service(store, RecordingSink(tmp_path / "out.jsonl"), clock, tmp_path).tick()
    assert {b.batch_id: b.size for b in report.published if b.batch_id in ids.values()} == {ids["DEAD"]: 2, ids["CLAIMED"]: 3}
    assert store.row_counts() == {"SENT": 8}
    store.close()


def test_a_batch_claimed_by_an_older_version_after_migration_8_gets_its_keys_from_migration_11(
        database_url, clock, monkeypatch, tmp_path):
    """While a deployment rolled out, a flush of the version before schema 8 may have claimed after
    migration 8: its batch has no member keys. Migration 11 gives it its keys (the by-batch-id
    path is gone), so its rows are counted as CLAIMED, block their partition, and are
    re-published whole under the same id; after it, a batch row without keys is refused."""
    store = MySQLStore(ConnectionParams.from_url(database_url))
    every = schema._migrations
    monkeypatch.setattr(schema, "_migrations", lambda *args: every(*args)[:10])
    assert store.migrate(T0) == list(range(1, 11))
    write_rows_as_before(store, [decode(r, FieldNames(), 1024) for r in orders(5, groups=1)])
    claimed = claim_as_before_schema_8(store, 3, group_key="WH-0")
    partition = f"p{bucket_of(T0)}"
    monkeypatch.setattr(schema, "_migrations", every)
    assert store.migrate(T0) == [11, 12, 13]
    assert store.load_batch(claimed).batch_id == claimed
    with pytest.raises(StoreError, match="member_keys"):  # what a version before schema 8 would write
        sql(store, "INSERT INTO batches (batch_id, group_key, state, flush_reason, member_count, claimed_at_ms)"
                   " VALUES (%s, 'WH-0', 'CLAIMED', 'idle', 1, %s)", ("e" * 32, T0))
    assert store.row_counts() == {"CLAIMED": 3, "PENDING": 2}
    assert store.unsent_rows_in_partition(partition) == 5
    assert len(store.load_batch(claimed).members) == 3

    clock.advance(POLICY.debounce_ms)
    sink = RecordingSink(tmp_path / "out.jsonl")
    report = make_service(store, sink, clock, tmp_path).tick()
    assert sorted(b.size for b in report.published) == [2, 3]
    assert store.row_counts() == {"SENT": 5} and store.unsent_rows_in_partition(partition) == 0
    assert_invariants(store, sink.messages(), 5)
