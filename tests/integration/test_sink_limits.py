"""Every sink knows its size limits: requests are chunked by size, a message over the limit is
refused before it is sent, and the flush splits a full group into batches under
CONSOLIDATOR_MAX_BATCH_BYTES (default: the sink's limit) instead of one batch that can only die."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws
from support import record
from test_flush import POLICY, RecordingSink, assert_invariants, ingest, make_service

from consolidator.rules.batch import Member, build_message, encode
from consolidator.rules.buffer import PendingBuffer
from consolidator.rules.deadletter import dead_batch_entry
from consolidator.rules.errors import ConfigurationError
from consolidator.rules.events import FieldNames, SourcePosition, decode
from consolidator.rules.policy import FlushReason, Policy
from consolidator.rules.split import fit_claims
from consolidator.services.flush_setup import batch_bytes_cap
from consolidator.sinks import OutgoingBatch, sink_from_url
from consolidator.sinks.deadletter import SqsDeadLetter
from consolidator.sinks.eventbridge import MAX_REQUEST_BYTES, EventBridgeSink
from consolidator.sinks.file import FileSink
from consolidator.sinks.kafka import KEY_AND_HEADER_BYTES, KafkaSink
from consolidator.sinks.sqs import SqsSink

REGION = "us-east-1"
KIB = 1024


@pytest.fixture
def aws(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield


def record_calls(client, operation: str) -> list[dict]:
    """The parameters of every call of ``operation`` the client makes (a botocore hook)."""
    calls: list[dict] = []
    service = client.meta.service_model.service_name
    client.meta.events.register(f"provide-client-params.{service}.{operation}",
                                lambda params, **_: calls.append(params))
    return calls


def batch_of(n: int, size: int) -> OutgoingBatch:
    return OutgoingBatch(f"{n:032x}", f"WH-{n}", json.dumps({"n": n, "pad": "x" * size}).encode())


def test_eventbridge_requests_stay_under_256_kb(aws):
    events = boto3.client("events", region_name=REGION)
    events.create_event_bus(Name="consolidated")
    calls = record_calls(events, "PutEvents")
    sink = EventBridgeSink("consolidated", client=events)
    batches = [batch_of(i, 60 * KIB) for i in range(10)]  # ten ~60 KB batches: 600 KB in all

    assert sink.publish(batches) == {}
    assert sum(len(c["Entries"]) for c in calls) == 10
    for call in calls:
        size = sum(len(e["Source"]) + len(e["DetailType"]) + len(e["Detail"].encode()) for e in call["Entries"])
        assert size <= MAX_REQUEST_BYTES and len(call["Entries"]) <= 10
    assert len(calls) == 3


def test_eventbridge_refuses_an_entry_over_the_limit_without_sending_it(aws):
    events = boto3.client("events", region_name=REGION)
    events.create_event_bus(Name="consolidated")
    calls = record_calls(events, "PutEvents")
    sink = EventBridgeSink("consolidated", client=events)
    too_big = OutgoingBatch("b" * 32, "WH-1", b"x" * (sink.max_message_bytes + 1))
    errors = sink.publish([batch_of(0, 10), too_big, batch_of(2, 10)])
    assert list(errors) == [1] and "over the 262144-byte limit" in errors[1]
    assert [len(c["Entries"]) for c in calls] == [2]


def test_sqs_counts_attributes_and_chunks_by_size(aws):
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="batches")["QueueUrl"]
    calls = record_calls(sqs, "SendMessageBatch")
    sink = SqsSink(url, client=sqs)
    batches = [batch_of(i, 100 * KIB) for i in range(5)]
    batches.append(OutgoingBatch("c" * 32, "WH-9", b"y" * (256 * KIB - 40)))  # body fits, attributes do not
    errors = sink.publish(batches)
    assert list(errors) == [5] and "over the 262144-byte limit" in errors[5]
    for call in calls:
        assert sum(SqsSink.message_bytes(e) for e in call["Entries"]) <= 256 * KIB
    assert sum(len(c["Entries"]) for c in calls) == 5


def test_kafka_and_file_sinks_know_their_limit():
    sink = KafkaSink("127.0.0.1:1", "batches", max_message_bytes=1000, flush_timeout_s=0.1)
    try:
        errors = sink.publish([OutgoingBatch("a" * 32, "WH-1", b"x" * 1000)])
        assert "over the 1000-byte limit" in errors[0]
    finally:
        sink._producer = None  # nothing was produced; skip the flush against a broker that is not there
    assert sink_from_url("kafka://b:9092/t?max_message_bytes=2000000").record_limit == 2_000_000
    assert sink_from_url("kafka://b:9092/t").record_limit == 1_000_000
    # the body cap leaves room for the longest group key and the header
    assert sink_from_url("kafka://b:9092/t").max_message_bytes == 1_000_000 - KEY_AND_HEADER_BYTES
    with pytest.raises(ValueError, match="max_message_bytes"):
        sink_from_url("kafka://b:9092/t?max_message_bytes=-1")
    assert FileSink.max_message_bytes == 1_000_000


def test_sqs_dead_letter_shortens_a_dead_batch_too_large_for_one_message(aws):
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="dead")["QueueUrl"]
    message = {"batch_id": "d" * 32, "group_key": "WH-1", "item_ids": [f"O{i:06d}" for i in range(20_000)],
               "items": [{"sku": f"SKU-{i:06d}", "quantity": 1} for i in range(5_000)],
               "members": [{"topic": "orders", "partition": 0, "offset": i} for i in range(500)]}
    entry = dead_batch_entry(message, 5, "too large", 0)
    assert len(json.dumps(entry)) > 256 * KIB
    assert SqsDeadLetter(url, client=sqs).send([entry, dead_batch_entry(message | {"items": []}, 5, "x", 0)]) == set()
    bodies = [json.loads(m["Body"]) for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]]
    shortened = next(b for b in bodies if b["detail"] == "too large")
    assert shortened["batch_truncated"] and shortened["batch"]["batch_id"] == "d" * 32
    assert len(shortened["batch"]["members"]) == 500 and "items" not in shortened["batch"]


# -- the batch byte cap in the flush and in the Spark buffer ------------------------------------

def big_orders(n: int, group: str = "WH-1"):
    """Orders of one group with many SKUs each: a message of ~n * 2.5 KB."""
    return [record(i, location=group, order=f"O{i}", key=group.encode(),
                   items=tuple((f"SKU-{i}-{k:03d}", 1) for k in range(60))) for i in range(n)]


def test_full_group_is_split_into_batches_under_the_cap_and_all_are_sent(store, clock, tmp_path):
    policy = Policy(POLICY.debounce_ms, POLICY.hard_window_ms, max_batch_size=50,
                    tick_interval_ms=POLICY.tick_interval_ms, max_batch_bytes=32 * KIB)
    ingest(store, clock, big_orders(60))
    sink = RecordingSink(tmp_path / "out.jsonl")
    report = make_service(store, sink, clock, tmp_path, policy=policy).tick()  # due: full (60 >= 50)

    assert report.publish_failures == 0 and report.dead == 0
    assert {p.reason for p in report.published} == {FlushReason.FULL}
    assert sum(p.size for p in report.published) == 50, "the whole full claim was sent, in pieces"
    assert len(report.published) > 1
    for message in sink.messages():
        assert len(encode(message)) <= 32 * KIB
    assert store.row_counts() == {"SENT": 50, "PENDING": 10}

    clock.advance(policy.debounce_ms)
    make_service(store, sink, clock, tmp_path, policy=policy).tick()
    assert_invariants(store, sink.messages(), 60)


def test_spark_buffer_splits_the_same_way_as_the_mysql_flush(store, clock, tmp_path):
    policy = Policy(POLICY.debounce_ms, POLICY.hard_window_ms, max_batch_size=50,
                    tick_interval_ms=POLICY.tick_interval_ms, max_batch_bytes=32 * KIB)
    records = big_orders(120)
    ingest(store, clock, records)
    buffer = PendingBuffer("WH-1")
    for event in (decode(r, FieldNames(), 256 * KIB) for r in records):
        buffer.ingest(event, clock.now_ms())
    clock.advance(policy.debounce_ms)

    sink = RecordingSink(tmp_path / "out.jsonl")
    make_service(store, sink, clock, tmp_path, policy=policy).tick()
    spark = [build_message("WH-1", members, reason, clock.now_ms())["batch_id"]
             for reason, members in buffer.flush(clock.now_ms(), policy)]
    assert [m["batch_id"] for m in sink.messages()] == spark
    assert len(spark) > 3


def test_fit_claims_without_a_cap_changes_nothing_while_sums_fit_int64():
    members = [Member(SourcePosition("t", 0, i), f"o{i}", (("S", 10**18),), 0, 0) for i in range(3)]
    claims = [(FlushReason.IDLE, members)]
    assert fit_claims("WH-1", claims, 0, Policy()) == claims


def test_cap_defaults_to_the_sink_limit_and_may_not_exceed_it(tmp_path):
    sink = FileSink(tmp_path / "out.jsonl")
    assert batch_bytes_cap(None, sink) == 1_000_000
    assert batch_bytes_cap(200_000, sink) == 200_000
    with pytest.raises(ConfigurationError, match="CONSOLIDATOR_MAX_BATCH_BYTES"):
        batch_bytes_cap(2_000_000, sink)


def test_a_kafka_body_within_the_sinks_cap_fits_with_the_longest_group_key_and_header():
    """The byte cap of batches defaults to the sink's ``max_message_bytes``: a body of exactly
    that size, under a 191-character group key of 4-byte characters, with the batch id and the
    traceparent headers (tracing on), passes the sink's own check."""
    sink = KafkaSink("127.0.0.1:1", "batches", max_message_bytes=2000, flush_timeout_s=0.1)
    try:
        largest = OutgoingBatch("a" * 32, "\U0001F600" * 191, b"x" * sink.max_message_bytes,
                                f"00-{'a' * 32}-{'1' * 16}-01")
        assert (len(largest.body) + len(largest.group_key.encode()) + len("batch_id") + 32
                + len("traceparent") + len(largest.traceparent)) == 2000
        errors = sink.publish([largest])
        assert "over the" not in errors.get(0, "")  # not refused for its size (no broker is there to take it)
    finally:
        sink._producer = None
