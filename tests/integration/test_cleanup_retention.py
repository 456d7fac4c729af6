"""Cleanup prunes the bookkeeping its partitions leave behind: ``batches``
rows whose member rows all went with their partitions, and idle rate states; never a CLAIMED
batch, a DEAD one with live rows, or a rate state still inside its window."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from support import record, sql

from consolidator.rules.events import FieldNames, decode
from consolidator.rules.policy import MAX_RATE_PERIOD_MS, FlushReason, RateLimit
from consolidator.services.cleanup import CleanupService

OCT_2026 = int(datetime(2026, 10, 15, tzinfo=UTC).timestamp() * 1000)  # bucket 202610, dropped in February
DEC_2026 = int(datetime(2026, 12, 15, tzinfo=UTC).timestamp() * 1000)  # bucket 202612, kept
FEB_2027 = int(datetime(2027, 2, 10, tzinfo=UTC).timestamp() * 1000)  # keeps 202611 onwards
DAY = 86_400_000


def claim_one(store, offset: int, group: str, record_ts_ms: int, claimed_at_ms: int) -> str:
    """A row of its own group, claimed at ``claimed_at_ms``; returns the batch id."""
    store.ingest([decode(record(offset, location=group, order=f"O{offset}", timestamp_ms=record_ts_ms),
                         FieldNames(), 256 * 1024)], claimed_at_ms)
    return store.claim(group, FlushReason.IDLE, 10, claimed_at_ms).batch_id


def test_batch_rows_go_with_their_partitions_and_live_ones_stay(store, clock):
    sent_gone = claim_one(store, 1, "G1", OCT_2026, OCT_2026)
    dead_gone = claim_one(store, 2, "G2", OCT_2026, OCT_2026)
    dead_live = claim_one(store, 3, "G3", DEC_2026, OCT_2026)  # its row lives in a kept partition
    claimed = claim_one(store, 4, "G4", DEC_2026, OCT_2026)
    sent_live = claim_one(store, 5, "G5", DEC_2026, OCT_2026)
    for batch in (sent_gone, sent_live):
        assert store.mark_sent(batch, OCT_2026)
    for batch in (dead_gone, dead_live):
        assert store.mark_dead(batch, OCT_2026, "sink refused")
    recent = claim_one(store, 6, "G6", OCT_2026, OCT_2026 + 20 * DAY)  # claimed after the first month kept
    store.mark_sent(recent, OCT_2026 + 20 * DAY)

    clock.set(FEB_2027)
    service = CleanupService(store, clock, retention_months=3, partitions_ahead=1)
    report = service.run()
    assert report.dropped == ["p202610"]
    assert report.batches_pruned == 2
    left = {r["batch_id"] for r in sql(store, "SELECT batch_id FROM batches")}
    assert left == {dead_live, claimed, sent_live, recent}
    assert store.revive_dead_batch(dead_live)  # a redrive can still revive it
    assert service.run().batches_pruned == 0  # idempotent


def test_rate_states_are_pruned_only_outside_any_window(store, clock):
    clock.set(FEB_2027)
    rows = [("IDLE", OCT_2026), ("RECENT", FEB_2027 - DAY), ("EDGE", FEB_2027 - MAX_RATE_PERIOD_MS + 1)]
    for group, at in rows:
        sql(store, "INSERT INTO group_rate_state (group_key, recent_ms, updated_at_ms) VALUES (%s, %s, %s)",
            (group, str(at), at))
    report = CleanupService(store, clock, retention_months=3, partitions_ahead=1).run()
    assert report.rate_states_pruned == 1
    assert [r["group_key"] for r in sql(store, "SELECT group_key FROM group_rate_state ORDER BY group_key")] == [
        "EDGE", "RECENT"]


def test_a_rate_period_is_at_most_the_window_cleanup_assumes():
    assert RateLimit(1, MAX_RATE_PERIOD_MS).period_ms == 7 * DAY
    with pytest.raises(ValueError, match="7 days"):
        RateLimit(1, MAX_RATE_PERIOD_MS + 1)
