"""The pipelined ingest (decode chunk k+1 while the server stores chunk k) ends exactly as the
exact path does: same response, outcome, buffer rows, marks and dead-letter entries, also when
a record in the middle is poison or fails its statement; and it leaves nothing behind when it
gives up half-way (docs/semantics.md section 4)."""

from __future__ import annotations

import pytest
from support import T0, record, sql

from consolidator.rules.errors import StoreError
from consolidator.rules.events import FieldNames, PoisonEvent, decode
from consolidator.services.ingest import IngestService
from consolidator.sinks.deadletter import FileDeadLetter
from consolidator.sources.msk import event_from_records

ROWS = ("SELECT bucket, group_key, item_id, status, pos_key, src_topic, src_partition, src_offset, record_ts_ms,"
        " items, merged_events, first_seen_ms, last_update_ms, batch_id FROM buffer_rows"
        " ORDER BY src_topic, src_partition, src_offset, group_key, item_id")  # ids differ after a rollback
MARKS = "SELECT * FROM partition_offsets ORDER BY src_topic, src_partition"
TRIGGER = ("CREATE TRIGGER reject_fail BEFORE INSERT ON buffer_rows FOR EACH ROW "
           "IF NEW.item_id LIKE 'FAIL%' THEN SIGNAL SQLSTATE '45000' "
           "SET MESSAGE_TEXT = 'rejected by test trigger'; END IF")


class Counting:
    """The store, counting how its pipelined ingest ended."""

    def __init__(self, store):
        self.store, self.pipelined = store, []

    def __getattr__(self, name):
        return getattr(self.store, name)

    def ingest_pipelined(self, *args):
        try:
            counts = self.store.ingest_pipelined(*args)
        except BaseException as error:
            self.pipelined.append(type(error).__name__)
            raise
        self.pipelined.append("done")
        return counts


def run(store, clock, tmp_path, name: str, invocations, pipeline_rows: int):
    """Every invocation through a fresh service; the end state of the database and dead letter."""
    for table in ("buffer_rows", "partition_offsets", "applied_positions"):
        sql(store, f"DELETE FROM {table}")
    counting = Counting(store)
    dead_letter = FileDeadLetter(tmp_path / f"{name}.jsonl")
    service = IngestService(counting, dead_letter, FieldNames(), 1024, clock, pipeline_rows=pipeline_rows)
    answers = []
    for records in invocations:
        outcome = service.ingest(records)
        answers.append((outcome.failed, outcome.stored, outcome.coalesced, outcome.replayed, outcome.dead_lettered,
                        service.handle_msk_event(event_from_records(records))))
    return answers, sql(store, ROWS), sql(store, MARKS), dead_letter.read(), counting.pipelined


def records_with(fail=(), poison=()):
    """17 records on 3 partitions: an item updated twice, a record repeated within the call."""
    out = []
    for o in range(16):
        order = ("FAIL" if o in fail else "O") + str(o if o not in (5, 11) else 5)  # 11 updates 5's item
        out.append(record(o, value=b"{oops" if o in poison else None, partition=o % 3, order=order,
                          timestamp_ms=T0 + o))
    return [*out, out[4]]


SCENARIOS = {
    "all valid": ([records_with()], ["done", "done"]),
    "a failing record in the middle": ([records_with(fail={7})], ["StoreError", "StoreError"]),
    "failing records in two partitions": ([records_with(fail={4, 9, 10})], ["StoreError", "StoreError"]),
    "poison in the middle": ([records_with(poison={8})], ["_Undecodable", "_Undecodable"]),
    "poison and a failing record": ([records_with(fail={13}, poison={6})], ["_Undecodable", "_Undecodable"]),
    "after a partial failure": ([records_with(fail={7})[:9], records_with(fail={12})],
                                ["StoreError"] * 4),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_pipelined_ingest_ends_exactly_as_the_exact_path(name, store, clock, tmp_path):
    invocations, pipelined = SCENARIOS[name]
    sql(store, TRIGGER)
    exact = run(store, clock, tmp_path, "exact", invocations, pipeline_rows=0)
    assert exact[-1] == []
    piped = run(store, clock, tmp_path, "piped", invocations, pipeline_rows=4)
    assert piped[:-1] == exact[:-1]
    assert piped[-1] == pipelined  # the pipeline ran, and gave up where expected
    assert exact[1], "something was stored"


def events(offsets, partition=0):
    return [decode(record(o, partition=partition, order=f"O{o}"), FieldNames(), 1024) for o in offsets]


def test_a_chunk_that_raises_half_way_rolls_back_what_was_sent(store, clock):
    def chunks():
        yield events(range(4))
        yield events(range(4, 8), partition=1)
        raise PoisonEvent("not_json", "found while decoding the third chunk")

    with pytest.raises(PoisonEvent):
        store.ingest_pipelined([("orders", 0), ("orders", 1)], chunks(), clock.now_ms())
    assert sql(store, "SELECT COUNT(*) AS n FROM buffer_rows") == [{"n": 0}]
    assert sql(store, MARKS) == []
    counts = store.ingest_pipelined([("orders", 0)], iter([events(range(3)), events(range(2, 5))]),
                                    clock.now_ms())
    assert (counts.stored, counts.replayed) == (5, 1)
    assert [(m["src_partition"], m["high_water"]) for m in sql(store, MARKS)] == [(0, 4)]


def test_a_statement_error_in_a_later_chunk_rolls_back_the_earlier_ones(store, clock):
    sql(store, TRIGGER)
    failing = [decode(record(9, order="FAIL9"), FieldNames(), 1024)]
    with pytest.raises(StoreError, match="rejected by test trigger"):
        store.ingest_pipelined([("orders", 0)], iter([events(range(4)), events(range(4, 8)), failing]),
                               clock.now_ms())
    assert sql(store, "SELECT COUNT(*) AS n FROM buffer_rows") == [{"n": 0}]
    assert sql(store, MARKS) == []
    assert store.ingest_pipelined([("orders", 0)], iter([events(range(2))]), clock.now_ms()).stored == 2
