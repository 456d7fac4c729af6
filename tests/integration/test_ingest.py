"""Ingest against real MariaDB: S1-S4, poison, partial failures, unreachable dependencies."""

from __future__ import annotations

import base64
import json
import random

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws
from support import ROWS, STATE, T0, record, sql

from consolidator.rules.errors import StoreConflict
from consolidator.rules.events import FieldNames, PoisonReason, decode
from consolidator.rules.policy import FlushReason
from consolidator.services.ingest import IngestService
from consolidator.sinks.deadletter import FileDeadLetter, SqsDeadLetter
from consolidator.sources.msk import event_from_records
from consolidator.store.mysql import ConnectionParams, MySQLStore

ALL_ROWS = "SELECT * FROM buffer_rows ORDER BY id"
MARKS = "SELECT * FROM partition_offsets ORDER BY src_topic, src_partition"


@pytest.fixture
def dead_letter(tmp_path) -> FileDeadLetter:
    return FileDeadLetter(tmp_path / "dead-letter.jsonl")


@pytest.fixture
def service(store, dead_letter, clock) -> IngestService:
    return IngestService(store, dead_letter, FieldNames(), 256 * 1024, clock)


def failures(response: dict) -> list[tuple[str, int]]:
    return [(f["itemIdentifier"]["partition"], f["itemIdentifier"]["offset"]) for f in response["batchItemFailures"]]


def msk_event(records):
    return event_from_records(records, "arn:aws:kafka:eu-west-1:1:cluster/c/x")


def test_s1_same_event_twice_leaves_tables_byte_for_byte_identical(service, store, clock):
    event = msk_event([record(o, partition=p, order=f"A{o % 4}", items=(("S", o),)) for p in (0, 1) for o in range(12)])
    assert service.handle_msk_event(event) == {"batchItemFailures": []}
    before = (sql(store, ALL_ROWS), sql(store, MARKS))
    clock.advance(60_000)
    assert service.handle_msk_event(event) == {"batchItemFailures": []}
    after = (sql(store, ALL_ROWS), sql(store, MARKS))
    assert after == before
    assert len(before[0]) == 4  # 24 records, 4 items: coalesced across partitions
    assert [(m["src_partition"], m["high_water"]) for m in before[1]] == [(0, 11), (1, 11)]


def test_s2_newer_event_replaces_and_bumps_older_replay_does_not(service, store, clock):
    service.ingest([record(5, order="A", items=(("OLD", 1),))])
    first_seen = sql(store, ALL_ROWS)[0]["first_seen_ms"]
    clock.advance(1_000)
    outcome = service.ingest([record(7, order="A", items=(("NEW", 2),))])
    assert (outcome.stored, outcome.coalesced) == (1, 1)
    [row] = sql(store, ALL_ROWS)
    assert json.loads(row["items"]) == [["NEW", 2]]
    assert (row["src_offset"], row["last_update_ms"], row["first_seen_ms"]) == (7, T0 + 1_000, first_seen)
    assert row["merged_events"] == 2

    clock.advance(1_000)
    outcome = service.ingest([record(5, order="A", items=(("OLD", 1),))])
    assert outcome.replayed == 1 and outcome.stored == 0
    assert sql(store, ALL_ROWS) == [row]


def test_s2_older_position_from_another_partition_keeps_newest_payload(service, store, clock):
    service.ingest([record(9, partition=2, order="A", items=(("P2", 1),))])
    clock.advance(500)
    service.ingest([record(3, partition=1, order="A", items=(("P1", 1),))])
    [row] = sql(store, ALL_ROWS)
    assert (row["src_partition"], json.loads(row["items"])) == (2, [["P2", 1]])
    assert row["first_seen_ms"] == T0 and row["last_update_ms"] == T0 + 500


@pytest.mark.parametrize("finish", [None, "SENT"])
def test_s3_event_after_claim_or_send_starts_a_new_pending_row(service, store, clock, finish):
    service.ingest([record(1, order="A")])
    batch = store.claim("WH-42", FlushReason.IDLE, 500, clock.now_ms())
    if finish:
        assert store.mark_sent(batch.batch_id, clock.now_ms())
    clock.advance(10)
    service.ingest([record(2, order="A", items=(("LATE", 9),))])
    rows = sql(store, f"SELECT r.*, {STATE} AS state FROM {ROWS} ORDER BY r.id")
    assert [(r["state"], r["src_offset"]) for r in rows] == [(finish or "CLAIMED", 1), ("PENDING", 2)]
    assert rows[1]["first_seen_ms"] == T0 + 10


def test_identifiers_differing_only_in_trailing_spaces_stay_apart(service, store, clock):
    """MySQL's PAD SPACE collations compare 'A' = 'A ': the buffer's keys must not."""
    service.ingest([record(1, order="A"), record(2, order="A "), record(3, order="A", location="WH-42 ")])
    rows = sql(store, "SELECT group_key, item_id, merged_events FROM buffer_rows ORDER BY id")
    assert [(r["group_key"], r["item_id"], r["merged_events"]) for r in rows] == [
        ("WH-42", "A", 1), ("WH-42", "A ", 1), ("WH-42 ", "A", 1)]
    assert sorted((g.group_key, g.pending) for g in store.pending_group_stats()) == [("WH-42", 2), ("WH-42 ", 1)]
    batch = store.claim("WH-42", FlushReason.IDLE, 500, clock.now_ms())
    assert sorted(m.item_id for m in batch.members) == ["A", "A "]


def _model_apply(model: dict, seen: set, event, now: int) -> None:
    """Reference model of the buffer: pending rows keyed by (bucket, group, item)."""
    if event.position in seen:
        return
    seen.add(event.position)
    key = (event.bucket, event.group_key, event.item_id)
    row = model.get(key)
    if row is None:
        model[key] = {"pos": event.position, "items": [list(i) for i in event.items], "first": now, "last": now, "n": 1}
        return
    row["n"] += 1
    row["last"] = max(row["last"], now)
    if event.position > row["pos"]:
        row["pos"], row["items"] = event.position, [list(i) for i in event.items]


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32))
def test_s4_randomized_history_matches_reference_model(seed, store, dead_letter):
    """1,200 events with duplicates, replays, out-of-order partitions, month boundaries and
    claims in between: the table equals the reference model, one PENDING row per key."""
    from consolidator.rules.clock import ManualClock
    from consolidator.rules.events import decode

    for table in ("buffer_rows", "partition_offsets", "applied_positions", "batches"):
        sql(store, f"TRUNCATE TABLE {table}")
    rng = random.Random(seed)
    clock = ManualClock(T0)
    service = IngestService(store, dead_letter, FieldNames(), 256 * 1024, clock)
    month_edge = 1_798_761_600_000  # 2027-01-01: events on both sides land in two buckets
    produced, offsets, model, seen = [], {0: 0, 1: 0, 2: 0}, {}, set()
    while len(produced) < 1_200:
        batch = []
        for _ in range(rng.randint(1, 40)):
            if produced and rng.random() < 0.15:
                batch.append(rng.choice(produced))  # replay of an earlier record
                continue
            partition = rng.choice((0, 1, 2))
            offsets[partition] += 1
            r = record(offsets[partition], partition=partition, location=f"W{rng.randint(0, 4)}",
                       order=f"O{rng.randint(0, 30)}", items=((f"S{rng.randint(0, 3)}", rng.randint(0, 9)),),
                       timestamp_ms=month_edge + rng.choice((-1, 1)) * rng.randint(1, 10**6))
            produced.append(r)
            batch.append(r)
        clock.advance(rng.randint(0, 2_000))
        assert service.ingest(batch).failed == []
        for r in batch:
            _model_apply(model, seen, decode(r, FieldNames(), 256 * 1024), clock.now_ms())
        if rng.random() < 0.1:  # a flush takes one group: its rows leave the pending model
            group = f"W{rng.randint(0, 4)}"
            if store.claim(group, FlushReason.IDLE, 10_000, clock.now_ms()):
                model = {k: v for k, v in model.items() if k[1] != group}
    pending = sql(store, "SELECT * FROM buffer_rows WHERE status = 'PENDING'")
    keys = [(r["bucket"], r["group_key"], r["item_id"]) for r in pending]
    assert len(keys) == len(set(keys)), "S4: more than one PENDING row for an item and bucket"
    actual = {
        (r["bucket"], r["group_key"], r["item_id"]): {
            "pos": (r["src_topic"], r["src_partition"], r["src_offset"]), "items": json.loads(r["items"]),
            "first": r["first_seen_ms"], "last": r["last_update_ms"], "n": r["merged_events"]}
        for r in pending
    }
    expected = {k: {**v, "pos": (v["pos"].topic, v["pos"].partition, v["pos"].offset)} for k, v in model.items()}
    assert actual == expected
    total = sql(store, "SELECT COALESCE(SUM(merged_events), 0) AS n FROM buffer_rows")[0]["n"]
    assert total == len(seen), "every distinct position is counted exactly once"


def test_poison_goes_to_dead_letter_and_neighbours_are_stored(service, store, dead_letter):
    poison_values = {
        1: b"\xff\xfe", 3: b"{oops", 5: b"[]", 7: b'{"order_id": "A"}', 9: b'{"location_id": "W"}',
        11: b'{"location_id": "W", "order_id": "A", "items": "x"}',
        13: b'{"location_id": "W", "order_id": "A", "items": [{"sku": "S", "quantity": -2}]}',
        15: b"{" + b" " * 300_000 + b"}",
    }
    records = [record(o, value=poison_values.get(o), order=f"G{o}") for o in range(17)]
    response = service.handle_msk_event(msk_event(records))
    assert response == {"batchItemFailures": []}
    entries = {e["source"]["offset"]: e for e in dead_letter.read()}
    assert {o: e["reason"] for o, e in entries.items()} == {
        1: "not_utf8", 3: "not_json", 5: "not_object", 7: "missing_group_key", 9: "missing_item_id",
        11: "bad_items", 13: "bad_quantity", 15: "too_large"}
    assert base64.b64decode(entries[3]["value_b64"]) == b"{oops"
    assert entries[3]["source"] == {"topic": "orders", "partition": 0, "offset": 3}
    assert entries[15]["value_truncated"] is True and entries[15]["value_bytes"] == 300_002
    stored = sorted(r["src_offset"] for r in sql(store, ALL_ROWS))
    assert stored == [o for o in range(17) if o not in poison_values]


def test_database_unreachable_reports_every_record_and_writes_nothing(store, dead_letter, clock):
    down = MySQLStore(ConnectionParams(host="127.0.0.1", port=1, database="nowhere"), connect_timeout=1)
    service = IngestService(down, dead_letter, FieldNames(), 256 * 1024, clock)
    records = [record(o, partition=o % 2) for o in range(6)]
    response = service.handle_msk_event(msk_event(records))
    assert sorted(failures(response)) == sorted((f"orders-{o % 2}", o) for o in range(6))
    assert dead_letter.read() == []


@mock_aws
def test_dead_letter_unreachable_fails_the_poison_record_and_the_rest_of_its_partition(store, clock):
    sqs = boto3.client("sqs", region_name="eu-west-1")
    missing = SqsDeadLetter("https://sqs.eu-west-1.amazonaws.com/123456789012/missing", client=sqs)
    service = IngestService(store, missing, FieldNames(), 256 * 1024, clock)
    records = [record(1), record(2, value=b"nope"), record(3, order="B"), record(4, partition=1, order="C")]
    response = service.handle_msk_event(msk_event(records))
    assert failures(response) == [("orders-0", 2), ("orders-0", 3)]
    assert sorted(r["src_offset"] for r in sql(store, ALL_ROWS)) == [1, 4]
    assert [(m["src_partition"], m["high_water"]) for m in sql(store, MARKS)] == [(0, 1), (1, 4)]


@mock_aws
def test_poison_reaches_sqs_with_position_raw_bytes_and_reason(store, clock):
    sqs = boto3.client("sqs", region_name="eu-west-1")
    url = sqs.create_queue(QueueName="consolidator-dlq")["QueueUrl"]
    service = IngestService(store, SqsDeadLetter(url, client=sqs), FieldNames(), 256 * 1024, clock)
    poison = [record(o, value=b"not json %d" % o) for o in range(12)]  # more than one SQS batch
    assert service.handle_msk_event(msk_event(poison)) == {"batchItemFailures": []}
    bodies = []
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        bodies += [json.loads(m["Body"]) for m in messages]
        sqs.delete_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)])
    assert sorted(b["source"]["offset"] for b in bodies) == list(range(12))
    assert {b["reason"] for b in bodies} == {PoisonReason.NOT_JSON.value}
    assert base64.b64decode(bodies[0]["value_b64"]).startswith(b"not json")


def test_partial_failure_fails_the_failing_record_and_the_rest_of_its_partition(service, store):
    """Each partition is applied as a contiguous prefix: Lambda resumes a partition from its
    lowest reported offset, so later records of it come back anyway and must not be written."""
    sql(store, "CREATE TRIGGER reject_fail BEFORE INSERT ON buffer_rows FOR EACH ROW "
               "IF NEW.item_id LIKE 'FAIL%' THEN SIGNAL SQLSTATE '45000' "
               "SET MESSAGE_TEXT = 'rejected by test trigger'; END IF")
    records = [record(o, partition=o % 3, order=("FAIL" if o in (4, 9, 10) else "OK") + str(o)) for o in range(15)]
    response = service.handle_msk_event(msk_event(records))
    assert failures(response) == [("orders-0", 9), ("orders-0", 12), ("orders-1", 4), ("orders-1", 7),
                                  ("orders-1", 10), ("orders-1", 13)]
    assert sorted(r["src_offset"] for r in sql(store, ALL_ROWS)) == [0, 1, 2, 3, 5, 6, 8, 11, 14]
    assert [(m["src_partition"], m["high_water"]) for m in sql(store, MARKS)] == [(0, 6), (1, 1), (2, 14)]
    # Lambda re-delivers each partition from its lowest failed offset: the stored ones replay as no-ops.
    sql(store, "DROP TRIGGER reject_fail")
    outcome = service.ingest(records)
    assert (outcome.failed, outcome.stored, outcome.replayed) == ([], 6, 9)
    assert sorted(r["src_offset"] for r in sql(store, ALL_ROWS)) == list(range(15))


class DeadlockingOnce(MySQLStore):
    """The real store whose ingest transaction the server rolls back ``conflicts`` times first,
    as InnoDB does to break a deadlock with a concurrent claim."""

    def __init__(self, params, conflicts: int):
        super().__init__(params)
        self.conflicts = conflicts

    def _ingest_once(self, *args):
        if self.conflicts:
            self.conflicts -= 1
            raise StoreConflict("database conflict, rolled back: (1213, 'Deadlock found')")
        return super()._ingest_once(*args)


def test_an_ingest_rolled_back_by_a_deadlock_runs_again_after_a_jittered_pause(store, clock, monkeypatch):
    from consolidator.store import buffer

    pauses: list[float] = []
    monkeypatch.setattr(buffer.time, "sleep", pauses.append)
    events = [decode(record(offset, order=f"O{offset}"), FieldNames(), 1024) for offset in range(3)]
    retrying = DeadlockingOnce(store.params, conflicts=buffer.CONFLICT_ATTEMPTS - 1)
    assert retrying.ingest(events, clock.now_ms()).stored == 3
    assert len(pauses) == buffer.CONFLICT_ATTEMPTS - 1
    assert all(0 <= p <= buffer.CONFLICT_BACKOFF_S * n for n, p in enumerate(pauses, start=1))
    stubborn = DeadlockingOnce(store.params, conflicts=buffer.CONFLICT_ATTEMPTS)
    with pytest.raises(StoreConflict):
        stubborn.ingest([decode(record(9, order="O9"), FieldNames(), 1024)], clock.now_ms())
    assert sql(store, "SELECT COUNT(*) AS n FROM buffer_rows") == [{"n": 3}]
    retrying.close()
    stubborn.close()


@pytest.mark.parametrize("entry", ["msk_event", "records"])
def test_records_are_decoded_with_the_collector_paused_and_left_with_it_on(service, store, monkeypatch, entry):
    """Through the Lambda's MSK event and through ``ingest`` itself, as the worker's writer and
    ``ingest --file`` call it: the records and their events are trees, no cycles."""
    import gc

    from consolidator.services import ingest as ingest_module

    seen = []
    decode_event = ingest_module.decode_event

    def watched(*args, **kwargs):
        seen.append(gc.isenabled())
        return decode_event(*args, **kwargs)

    monkeypatch.setattr(ingest_module, "decode_event", watched)
    assert gc.isenabled()
    records = [record(i, order=f"A{i:03d}") for i in range(4)]
    if entry == "msk_event":
        assert service.handle_msk_event(msk_event(records)) == {"batchItemFailures": []}
    else:
        assert service.ingest(records).failed == []
    assert seen == [False] * 4 and gc.isenabled()
    assert len(sql(store, "SELECT id FROM buffer_rows")) == 4
