"""Schema migrations upgrade a database that already holds rows, and stop at what is applied."""

from __future__ import annotations

from support import ROWS, STATE, T0, record, sql

from consolidator.rules.events import FieldNames, bucket_of, decode
from consolidator.rules.policy import FlushReason
from consolidator.store import schema
from consolidator.store.mysql import ConnectionParams, MySQLStore


def test_upgrade_from_version_1_keeps_rows_and_they_flush(database_url, monkeypatch):
    store = MySQLStore(ConnectionParams.from_url(database_url))
    every = schema._migrations
    monkeypatch.setattr(schema, "_migrations", lambda *args: every(*args)[:1])
    assert store.migrate(T0) == [1]
    events = [decode(record(offset, order=order), FieldNames(), 1024) for offset, order in ((1, "A"), (2, "A "))]
    # written as version 1 wrote it: batch_id NULL, 'A' = 'A ', its position in the ledger
    sql(store, "INSERT INTO buffer_rows (bucket, group_key, item_id, pos_key, src_topic, src_partition, src_offset,"
               " record_ts_ms, items, first_seen_ms, last_update_ms) VALUES (%s, 'WH-42', 'A', %s, 'orders', 0, 1,"
               " %s, '[]', %s, %s)", (events[0].bucket, events[0].position.sort_key(), T0, T0, T0))
    sql(store, "INSERT INTO ingested_positions (pos_key, bucket, ingest_marker) VALUES (%s, %s, 1)",
        (events[0].position.sort_key(), events[0].bucket))

    monkeypatch.setattr(schema, "_migrations", every)
    assert store.migrate(T0) == [v for v, _, _ in every(bucket_of(T0), "utf8mb4_bin")][1:]  # every later one
    assert store.migrate(T0) == []
    assert sql(store, "SELECT item_id, batch_id FROM buffer_rows") == [{"item_id": "A", "batch_id": ""}]
    assert store.ingest(events, T0).replayed == 1  # the ledger's position stays a no-op
    batch = store.claim("WH-42", FlushReason.IDLE, 10, T0)
    assert sorted(m.item_id for m in batch.members) == ["A", "A "]
    assert store.mark_sent(batch.batch_id, T0)
    assert sql(store, f"SELECT {STATE} AS status, COUNT(*) AS n FROM {ROWS} GROUP BY 1") == [{"status": "SENT", "n": 2}]
    store.close()
