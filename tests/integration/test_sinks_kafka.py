"""Kafka sink against librdkafka's mock cluster, read back by a real consumer: key = group key,
header batch_id, JSON value valid against the v1 schema; unconfirmed deliveries are failures."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from test_flush import POLICY, VALIDATOR, assert_invariants, ingest, make_service, orders

from consolidator.sinks import OutgoingBatch, sink_from_url
from consolidator.sinks.kafka import KafkaSink, msk_iam_oauth_cb


@pytest.fixture(scope="module")
def bootstrap() -> str:
    """Bootstrap servers of an in-process 3-broker mock cluster (lives as long as its producer)."""
    owner = Producer({"test.mock.num.brokers": 3})
    brokers = owner.list_topics(timeout=10).brokers.values()
    yield ",".join(f"{b.host}:{b.port}" for b in brokers)
    owner.flush(5)


def consume(bootstrap: str, topic: str, expected: int, timeout_s: float = 30) -> list:
    """Every message of ``topic``: exactly ``expected`` of them (one more would be a duplicate
    publish). Read by offset up to the high watermarks, with no consumer group: a group join on
    the mock cluster takes seconds, and the watermarks count every message the topic holds."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "enable.auto.commit": False})
    got = []
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ranges = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in partitions}
        assert sum(high - low for low, high in ranges.values()) == expected, f"messages per partition: {ranges}"
        consumer.assign([TopicPartition(topic, p, low) for p, (low, high) in ranges.items() if high > low])
        deadline = time.monotonic() + timeout_s
        while len(got) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append(message)
    finally:
        consumer.close()
    return got


def test_flush_to_kafka_read_back_by_a_consumer(bootstrap, store, clock, tmp_path):
    topic = f"batches-{uuid.uuid4().hex[:8]}"
    sink = sink_from_url(f"kafka://{bootstrap}/{topic}")
    assert isinstance(sink, KafkaSink)
    ingest(store, clock, orders(120, groups=3))  # 40 rows per group, max_batch_size 50
    clock.advance(POLICY.debounce_ms)
    report = make_service(store, sink, clock, tmp_path).tick()
    assert len(report.published) == 3 and report.publish_failures == 0
    sink.close()

    received = consume(bootstrap, topic, 3)
    assert len(received) == 3
    messages = []
    for message in received:
        value = json.loads(message.value())
        VALIDATOR.validate(value)
        assert message.key().decode() == value["group_key"]
        assert dict(message.headers()) == {"batch_id": value["batch_id"].encode()}
        messages.append(value)
    assert_invariants(store, messages, 120)
    assert sorted(m["group_key"] for m in messages) == ["WH-0", "WH-1", "WH-2"]


def test_unreachable_brokers_report_every_batch_as_failed():
    sink = KafkaSink("127.0.0.1:1", "nowhere", flush_timeout_s=1.0)
    batches = [OutgoingBatch(f"{i:032x}", "WH-1", b'{"x":1}') for i in range(3)]
    started = time.monotonic()
    errors = sink.publish(batches)
    assert sorted(errors) == [0, 1, 2]
    assert all("kafka" in e for e in errors.values())
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    "url",
    ["kafka://b1:9092/", "kafka:///topic", "kafka://b1:9092/a/b", "kafka://b1:9092/t?auth=scram",
     "kafka://b1:9092/t?auth=iam"],
)
def test_bad_kafka_urls_are_refused(url):
    with pytest.raises(ValueError):
        sink_from_url(url)


def test_iam_auth_signs_a_token_locally_and_configures_the_producer(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    token, expiry_s = msk_iam_oauth_cb("eu-west-1")("")
    assert token and expiry_s > time.time()
    sink = sink_from_url("kafka://b-1.example:9098,b-2.example:9098/batches?auth=iam&region=eu-west-1")
    assert isinstance(sink, KafkaSink) and sink.topic == "batches"
