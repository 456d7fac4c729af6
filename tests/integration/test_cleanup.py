"""Cleanup against real MariaDB: future partitions, guarded drops, idempotence, the handler."""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support import ROWS, STATE, T0, record, sql

from consolidator.demo.lambda_context import LocalLambdaContext
from consolidator.rules.events import FieldNames, decode, months_after
from consolidator.rules.policy import FlushReason
from consolidator.services.cleanup import CleanupService

REPO = Path(__file__).resolve().parents[2]
OCT_2026 = int(datetime(2026, 10, 15, tzinfo=UTC).timestamp() * 1000)  # bucket 202610
FEB_2027 = int(datetime(2027, 2, 10, tzinfo=UTC).timestamp() * 1000)  # keeps 202611 onwards


def names(store) -> list[str]:
    return [p.name for p in store.partitions()]


def ingest_october(store, offset: int = 1, order: str = "A001"):
    event = decode(record(offset, timestamp_ms=OCT_2026, order=order), FieldNames(), 256 * 1024)
    store.ingest([event], T0)
    return event


def test_months_after_crosses_years():
    assert months_after(202611, 3) == 202702
    assert months_after(202602, -3) == 202511
    assert months_after(202612, 0) == 202612


def test_creates_future_partitions_and_second_run_is_a_no_op(store, clock):
    assert names(store) == ["p202610", "p202611", "pmax"]
    service = CleanupService(store, clock, retention_months=3, partitions_ahead=3)
    first = service.run()
    assert first.created == ["p202612", "p202701", "p202702"]
    assert first.dropped == [] and first.refused == []
    assert names(store) == ["p202610", "p202611", "p202612", "p202701", "p202702", "pmax"]
    assert {p.name for p in store.partitions("applied_positions")} == set(names(store))

    second = service.run()
    assert not second.changed and second.refused == []
    assert names(store) == ["p202610", "p202611", "p202612", "p202701", "p202702", "pmax"]


def test_drops_old_partition_holding_only_sent_rows(store, clock):
    event = ingest_october(store)
    batch = store.claim("WH-42", FlushReason.IDLE, 10, T0)
    assert store.mark_sent(batch.batch_id, T0)
    assert event.bucket == 202610

    clock.set(FEB_2027)
    report = CleanupService(store, clock, retention_months=3, partitions_ahead=1).run()
    assert report.dropped == ["p202610"]
    assert report.created == ["p202612", "p202701", "p202702", "p202703"]
    assert "p202610" not in names(store)
    assert "p202610" not in {p.name for p in store.partitions("applied_positions")}
    assert sql(store, "SELECT COUNT(*) AS n FROM buffer_rows")[0]["n"] == 0

    again = CleanupService(store, clock, retention_months=3, partitions_ahead=1).run()
    assert not again.changed and again.refused == []


@pytest.mark.parametrize("state", ["PENDING", "CLAIMED"])
def test_refuses_to_drop_a_partition_with_one_unsent_row(store, clock, state):
    ingest_october(store, 1, "A001")
    ingest_october(store, 2, "A002")
    batch = store.claim("WH-42", FlushReason.IDLE, 10, T0)
    assert store.mark_sent(batch.batch_id, T0)
    ingest_october(store, 3, "A003")  # one PENDING row next to two SENT ones
    if state == "CLAIMED":
        assert store.claim("WH-42", FlushReason.IDLE, 10, T0).members[0].item_id == "A003"

    clock.set(FEB_2027)
    service = CleanupService(store, clock, retention_months=3, partitions_ahead=1)
    report = service.run()
    assert report.dropped == []
    assert [(r.partition, r.unsent_rows) for r in report.refused] == [("p202610", 1)]
    assert "p202610" in names(store)
    rows = sql(store, f"SELECT item_id, {STATE} AS status FROM {ROWS} ORDER BY item_id")
    assert [(r["item_id"], r["status"]) for r in rows] == [("A001", "SENT"), ("A002", "SENT"), ("A003", state)]

    # The refusal is stable (nothing changes), and once the row is sent the drop happens.
    assert not service.run().changed
    if state == "PENDING":
        batch = store.claim("WH-42", FlushReason.IDLE, 10, T0)
    else:
        batch = store.load_batch(store.claimed_batch_ids(10)[0])
    assert store.mark_sent(batch.batch_id, T0)
    assert service.run().dropped == ["p202610"]


def test_cleanup_handler_runs_the_service(store, clock, database_url, monkeypatch):
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_URL", database_url)
    monkeypatch.setenv("CONSOLIDATOR_PARTITIONS_AHEAD", "2")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    spec = importlib.util.spec_from_file_location("cleanup_handler_under_test", REPO / "functions/cleanup/handler.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.handler({}, LocalLambdaContext(function_name="cleanup"))
    month = int(datetime.now(UTC).strftime("%Y%m"))
    assert result["month"] == month
    assert result["ensured_through"] == months_after(month, 2)
    assert f"p{months_after(month, 2)}" in names(store)
    second = module.handler({}, LocalLambdaContext(function_name="cleanup"))
    assert second["created"] == [] and second["dropped"] == []
