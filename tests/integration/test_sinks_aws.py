"""SQS and EventBridge sinks on moto: messages, attributes, FIFO ids, per-entry failures."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws
from test_flush import POLICY, VALIDATOR, assert_invariants, ingest, make_service, orders

from consolidator.sinks import OutgoingBatch, sink_from_url
from consolidator.sinks.eventbridge import EventBridgeSink
from consolidator.sinks.sqs import SqsSink

REGION = "us-east-1"


@pytest.fixture
def aws(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("sqs", region_name=REGION)


def receive_all(sqs, url: str) -> list[dict]:
    out = []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"],
                                       WaitTimeSeconds=0).get("Messages", []):
        out.extend(batch)
        sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                        for i, m in enumerate(batch)])
    return out


def test_flush_to_sqs(aws, store, clock, tmp_path):
    url = aws.create_queue(QueueName="batches")["QueueUrl"]
    sink = sink_from_url("sqs://" + url.removeprefix("https://"))
    assert isinstance(sink, SqsSink)
    ingest(store, clock, orders(60, groups=12))
    clock.advance(POLICY.debounce_ms)
    report = make_service(store, sink, clock, tmp_path).tick()
    assert len(report.published) == 12  # more than one SendMessageBatch call of 10
    received = receive_all(aws, url)
    messages = [json.loads(m["Body"]) for m in received]
    for raw, message in zip(received, messages, strict=True):
        VALIDATOR.validate(message)
        assert raw["MessageAttributes"]["batch_id"]["StringValue"] == message["batch_id"]
        assert raw["MessageAttributes"]["group_key"]["StringValue"] == message["group_key"]
    assert_invariants(store, messages, 60)


def test_fifo_queue_groups_by_key_and_dedupes_by_batch_id(aws):
    url = aws.create_queue(QueueName="batches.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    sink = SqsSink(url)
    batch = OutgoingBatch("a" * 32, "WH-1", b'{"batch_id":"x"}')
    assert sink.publish([batch]) == {}
    assert sink.publish([batch]) == {}  # a re-publish inside the dedup window is absorbed
    received = aws.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                   AttributeNames=["MessageGroupId", "MessageDeduplicationId"])["Messages"]
    assert len(received) == 1
    assert received[0]["Attributes"]["MessageGroupId"] == "WH-1"
    assert received[0]["Attributes"]["MessageDeduplicationId"] == "a" * 32


def test_missing_queue_fails_every_batch(aws):
    sink = SqsSink(f"https://sqs.{REGION}.amazonaws.com/123456789012/missing")
    errors = sink.publish([OutgoingBatch(f"{i:032x}", "WH-1", b"{}") for i in range(12)])
    assert sorted(errors) == list(range(12))


def test_flush_to_eventbridge_routed_to_a_queue(aws, store, clock, tmp_path):
    events = boto3.client("events", region_name=REGION)
    events.create_event_bus(Name="consolidated")
    url = aws.create_queue(QueueName="routed")["QueueUrl"]
    arn = aws.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="all", EventBusName="consolidated",
                    EventPattern=json.dumps({"source": ["consolidator.test"]}))
    events.put_targets(Rule="all", EventBusName="consolidated", Targets=[{"Id": "q", "Arn": arn}])
    sink = sink_from_url("events://consolidated?source=consolidator.test&detail_type=Batch")
    assert isinstance(sink, EventBridgeSink)
    ingest(store, clock, orders(33, groups=11))
    clock.advance(POLICY.debounce_ms)
    report = make_service(store, sink, clock, tmp_path).tick()
    assert len(report.published) == 11
    envelopes = [json.loads(m["Body"]) for m in receive_all(aws, url)]
    assert {e["detail-type"] for e in envelopes} == {"Batch"}
    messages = [e["detail"] for e in envelopes]
    for message in messages:
        VALIDATOR.validate(message)
    assert_invariants(store, messages, 33)


def test_missing_event_bus_fails_every_batch(aws):
    sink = EventBridgeSink("nope")
    assert sorted(sink.publish([OutgoingBatch(f"{i:032x}", "WH-1", b"{}") for i in range(3)])) == [0, 1, 2]


@pytest.mark.parametrize("url", ["sqs://sqs.us-east-1.amazonaws.com/q", "events://", "file://", "s3://b/k"])
def test_bad_sink_urls_are_refused(url):
    with pytest.raises(ValueError):
        sink_from_url(url)
