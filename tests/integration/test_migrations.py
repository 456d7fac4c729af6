"""Schema migrations upgrade a database that already holds rows, and stop at what is applied."""

from __future__ import annotations

from support import T0, record, sql

from consolidator.events import FieldNames, decode
from consolidator.policy import FlushReason
from consolidator.store import schema
from consolidator.store.mysql import ConnectionParams, MySQLStore


def test_upgrade_from_version_1_keeps_rows_and_they_flush(database_url, monkeypatch):
    store = MySQLStore(ConnectionParams.from_url(database_url))
    every = schema._migrations
    monkeypatch.setattr(schema, "_migrations", lambda *args: every(*args)[:1])
    assert store.migrate(T0) == [1]
    events = [decode(record(offset, order=order), FieldNames(), 1024) for offset, order in ((1, "A"), (2, "A "))]
    store.ingest(events[:1], T0)  # written under version 1: batch_id NULL, 'A' = 'A '

    monkeypatch.setattr(schema, "_migrations", every)
    assert store.migrate(T0) == [version for version, _, _ in every(0, "utf8mb4_bin")][1:]
    assert store.migrate(T0) == []
    assert sql(store, "SELECT item_id, batch_id FROM buffer_rows") == [{"item_id": "A", "batch_id": ""}]
    store.ingest(events[1:], T0)
    batch = store.claim("WH-42", FlushReason.IDLE, 10, T0)
    assert sorted(m.item_id for m in batch.members) == ["A", "A "]
    assert store.mark_sent(batch.batch_id, T0)
    assert sql(store, "SELECT status, COUNT(*) AS n FROM buffer_rows GROUP BY status") == [{"status": "SENT", "n": 2}]
    store.close()
