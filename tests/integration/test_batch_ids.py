"""Batch ids never collide: after a topic is recreated and its offsets reset,
new claims at an old batch's positions get new ids; a claim whose id is taken anyway is counted
and logged at ERROR with the id and the group, never a silent failure on every tick."""

from __future__ import annotations

import logging

from support import record, sql
from test_flush import POLICY, RecordingSink, ingest, make_service

from consolidator.rules.batch import batch_id
from consolidator.rules.events import SourcePosition


class Metrics:
    def __init__(self) -> None:
        self.names: list[str] = []

    def add_metric(self, name: str, unit: str, value: float) -> None:
        self.names.append(name)


def three_orders():
    return [record(o, location="WH-1", order=f"O{o}", key=b"WH-1") for o in range(3)]


def test_a_recreated_topic_gets_new_batch_ids_after_offsets_reset(store, clock, tmp_path):
    sink = RecordingSink(tmp_path / "out.jsonl")
    ingest(store, clock, three_orders())
    clock.advance(POLICY.debounce_ms)
    make_service(store, sink, clock, tmp_path).tick()
    [old] = sink.messages()

    store.reset_offsets("orders")  # the topic was deleted and recreated: offsets start at 0 again
    assert ingest(store, clock, three_orders()) == 3, "the recreated topic's records are stored"
    clock.advance(POLICY.debounce_ms)
    metrics = Metrics()
    for _ in range(2):
        make_service(store, sink, clock, tmp_path, metrics=metrics).tick()
        clock.advance(POLICY.tick_interval_ms)

    assert [m["members"] for m in sink.messages()] == [old["members"]] * 2, "same positions, twice"
    new = sink.messages()[1]
    assert new["batch_id"] != old["batch_id"]
    assert store.row_counts() == {"SENT": 6}, "nothing left PENDING behind a taken id"
    assert "DuplicateBatchIds" not in metrics.names
    assert sql(store, "SELECT src_topic, epoch FROM topic_epochs") == [{"src_topic": "orders", "epoch": 1}]


def test_a_claim_whose_id_is_taken_is_counted_and_logged_with_its_id_and_group(store, clock, tmp_path, caplog):
    ingest(store, clock, three_orders())
    taken = batch_id("WH-1", [SourcePosition("orders", 0, o) for o in range(3)])
    with store.transaction() as cur:  # a stored batch already has the id the claim will compute
        cur.execute("INSERT INTO batches (batch_id, group_key, state, flush_reason, member_count, claimed_at_ms,"
                    " member_keys) VALUES (%s, 'WH-1', 'SENT', 'idle', 3, 0, '[]')", (taken,))
    clock.advance(POLICY.debounce_ms)
    metrics = Metrics()
    sink = RecordingSink(tmp_path / "out.jsonl")
    with caplog.at_level(logging.INFO, logger="consolidator"):
        report = make_service(store, sink, clock, tmp_path, metrics=metrics).tick()

    assert report.published == [] and sink.messages() == []
    assert metrics.names.count("DuplicateBatchIds") == 1
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [(r.batch_id, r.group_key) for r in errors] == [(taken, "WH-1")], caplog.text
    assert store.row_counts() == {"PENDING": 3}, "nothing claimed: the rows wait, visibly"
