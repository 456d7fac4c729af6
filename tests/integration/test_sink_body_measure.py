"""Every sink's byte limit applies to its own encoded body: the flush, wired from its settings as
the function wires it (``build_flush_service``), splits a group whose events hold the characters
each sink writes widest (U+FFFF, U+FFFE: three UTF-8 bytes, six as the SQS sink escapes them;
control characters, quotes and backslashes, which the JSON encoder escapes) so that the real sink
(moto for SQS and EventBridge, librdkafka's mock cluster, a file) accepts every batch. Lone
surrogates cannot occur: ingest refuses a value holding one (not UTF-8, or not JSON)."""

from __future__ import annotations

import json
import uuid

import boto3
import pytest
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws
from support import REDIS_URL, sql
from test_buffer_rules import shared  # noqa: F401
from test_sinks_kafka import bootstrap, consume  # noqa: F401

from consolidator.rules.events import FieldNames, KafkaRecord
from consolidator.rules.shape import Shape, parse_outputs
from consolidator.services.flush_setup import build_flush_service
from consolidator.services.ingest import IngestService
from consolidator.settings import FlushSettings, load_settings
from consolidator.sinks.deadletter import FileDeadLetter
from consolidator.sinks.sqs import MAX_BATCH_BYTES
from consolidator.sinks.sqs_text import escape_json, is_sqs_text

REGION = "us-east-1"
WIDEST = "\uffff\ufffe\x01\x1f\"\\\u2028\U0001f600"  # each a worst case of some encoding
SHAPE = Shape(parse_outputs('[{"name": "n", "op": "count"}]'), full_payload=True)
NAMES = FieldNames(group_key="tenant", item_id="user", shape=SHAPE)


@given(st.text(st.characters(codec="utf-8") | st.sampled_from(list(WIDEST)), max_size=200))
def test_the_sqs_measure_is_the_size_of_the_escaped_body(text):
    from consolidator.sinks.sqs_text import escaped_bytes

    body = json.dumps({"t": text}, ensure_ascii=False).encode()
    assert escaped_bytes(body) == len(escape_json(body.decode()).encode())
    assert escaped_bytes(text.encode()) == len(escape_json(text).encode())


def _ingest(store, clock, tmp_path, events: int, chars: int) -> None:
    """``events`` events of one group, each holding every widest character and ``chars`` U+FFFF."""
    values = [json.dumps({"tenant": "T\uffff\"\\", "user": f"u{i}", "blob": WIDEST + "\uffff" * chars},
                         ensure_ascii=False).encode() for i in range(events)]
    records = [KafkaRecord("events", 0, i, clock.now_ms(), b"T", value) for i, value in enumerate(values)]
    service = IngestService(store, FileDeadLetter(tmp_path / "ingest-dead.jsonl"), NAMES, 1 << 20, clock)
    assert service.ingest(records).stored == events


def _flush(sink_url: str, database_url: str, clock, tmp_path, **extra: str):
    environ = {"CONSOLIDATOR_DATABASE_URL": database_url, "CONSOLIDATOR_SINK_URL": sink_url,
               "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{tmp_path / 'dead.jsonl'}",
               "CONSOLIDATOR_REDIS_URL": REDIS_URL, "CONSOLIDATOR_GROUP_KEY_FIELD": "tenant",
               "CONSOLIDATOR_ITEM_ID_FIELD": "user", "CONSOLIDATOR_AGGREGATE": '[{"name": "n", "op": "count"}]',
               "CONSOLIDATOR_MEMBER_PAYLOAD": "full", "CONSOLIDATOR_DEBOUNCE_SECONDS": "1",
               "CONSOLIDATOR_HARD_WINDOW_SECONDS": "60", **extra}
    service = build_flush_service(load_settings(FlushSettings, environ=environ), clock=clock)
    service.lock = None  # the shared Redis: this test's ticks never wait for another flusher
    clock.advance(2_000)
    report = service.tick()
    service.sink.close()
    assert (report.publish_failures, report.dead) == (0, 0)
    return service, report


def _all_sent(store, events: int) -> None:
    rows = sql(store, "SELECT COALESCE(b.state, r.status) AS state FROM buffer_rows r"
                      " LEFT JOIN batches b ON r.status = 'CLAIMED' AND b.batch_id = r.batch_id")
    assert [r["state"] for r in rows] == ["SENT"] * events


@pytest.fixture
def aws(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("sqs", region_name=REGION)


def _receive_all(sqs, url: str) -> list[dict]:
    out = []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", []):
        out.extend(batch)
        sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                        for i, m in enumerate(batch)])
    return out


def test_sqs_counts_the_escaped_body_against_its_cap(aws, store, clock, tmp_path, database_url):
    """Five 48 KB events of U+FFFF and friends: 240 KB of UTF-8, under the SQS cap as UTF-8 but
    twice that as sent. The batches are split on the escaped size and SQS takes them all."""
    url = aws.create_queue(QueueName="batches")["QueueUrl"]
    _ingest(store, clock, tmp_path, 5, 16_000)
    service, report = _flush("sqs://" + url.removeprefix("https://"), database_url, clock, tmp_path)
    assert len(report.published) >= 3
    bodies = [m["Body"] for m in _receive_all(aws, url)]
    for body in bodies:
        assert is_sqs_text(body) and len(body.encode()) <= service.policy.max_batch_bytes <= MAX_BATCH_BYTES
    assert sum(len(json.loads(b)["members"]) for b in bodies) == 5
    _all_sent(store, 5)


def test_eventbridge_counts_the_detail_as_sent(aws, store, clock, tmp_path, database_url):
    events = boto3.client("events", region_name=REGION)
    events.create_event_bus(Name="consolidated")
    url = aws.create_queue(QueueName="routed")["QueueUrl"]
    arn = aws.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="all", EventBusName="consolidated", EventPattern=json.dumps({"source": ["consolidator"]}))
    events.put_targets(Rule="all", EventBusName="consolidated", Targets=[{"Id": "q", "Arn": arn}])
    _ingest(store, clock, tmp_path, 5, 20_000)
    service, report = _flush("events://consolidated", database_url, clock, tmp_path)
    details = [json.loads(m["Body"])["detail"] for m in _receive_all(aws, url)]
    assert sum(len(d["members"]) for d in details) == 5 and len(details) == len(report.published) >= 2
    for detail in details:
        assert len(json.dumps(detail, ensure_ascii=False, separators=(",", ":")).encode()) <= (
            service.policy.max_batch_bytes)
    _all_sent(store, 5)


def test_kafka_counts_the_value_and_keeps_room_for_key_and_header(bootstrap, store, clock, tmp_path,  # noqa: F811
                                                                   database_url):
    topic = f"batches-{uuid.uuid4().hex[:8]}"
    _ingest(store, clock, tmp_path, 5, 16_000)
    _, report = _flush(f"kafka://{bootstrap}/{topic}?max_message_bytes=120000", database_url, clock, tmp_path)
    received = consume(bootstrap, topic, len(report.published))
    assert sum(len(json.loads(m.value())["members"]) for m in received) == 5 and len(received) >= 3
    for message in received:
        assert len(message.value()) + len(message.key()) + len("batch_id") + 32 <= 120_000
        assert message.key() == "T\uffff\"\\".encode()
    _all_sent(store, 5)


def test_the_file_sink_counts_the_line_as_written(store, clock, tmp_path, database_url):
    _ingest(store, clock, tmp_path, 5, 100_000)
    service, _ = _flush(f"file://{tmp_path / 'out.jsonl'}", database_url, clock, tmp_path)
    lines = (tmp_path / "out.jsonl").read_bytes().splitlines()
    assert sum(len(json.loads(line)["members"]) for line in lines) == 5 and len(lines) >= 2
    assert all(len(line) <= service.sink.max_message_bytes for line in lines)
    _all_sent(store, 5)


def test_a_lone_surrogate_never_reaches_a_sink(store, clock, tmp_path):
    """Escaped or raw, a lone surrogate makes the value poison at ingest: no body holds one."""
    values = [b'{"tenant": "T", "user": "u", "blob": "\\ud800"}', b'{"tenant": "T", "user": "v", "blob": "\xed\xa0\x80"}']
    service = IngestService(store, FileDeadLetter(tmp_path / "dead.jsonl"), NAMES, 1 << 20, clock)
    outcome = service.ingest([KafkaRecord("events", 0, i, clock.now_ms(), b"T", v) for i, v in enumerate(values)])
    assert (outcome.stored, [reason for _, reason, _ in outcome.poison]) == (0, ["not_json", "not_utf8"])


def test_the_spark_jobs_take_the_sinks_measure_with_its_cap():
    """The streaming job's policy gets the same cap and measure as the flush function's."""
    from consolidator.cli.spark.options import _batch_cap
    from consolidator.sinks.sqs_text import escaped_bytes

    assert _batch_cap("sqs://sqs.us-east-1.amazonaws.com/123456789012/batches", None) == (
        MAX_BATCH_BYTES - 2048, escaped_bytes)
    assert _batch_cap(f"file:///tmp/{uuid.uuid4().hex}.jsonl", 5000) == (5000, len)


def test_the_streaming_step_splits_by_the_sqs_measure_as_the_flush_does(shared):  # noqa: F811
    """Events of U+FFFF under a 3,000-byte cap counted as SQS sends them: the Lambda path and the
    streaming step make the same batches, each within the cap as escaped (or one member alone)."""
    import dataclasses
    import random

    from test_buffer_rules import MONTH_END
    from test_buffer_rules_shape import both_paths

    from consolidator.rules.policy import Policy
    from consolidator.sinks.sqs_text import escaped_bytes
    from consolidator.spark.step import job_step

    policy = Policy(debounce_ms=2_000, hard_window_ms=20_000, max_batch_size=20, tick_interval_ms=5_000,
                    max_batch_bytes=3_000, measure_body=escaped_bytes)
    history = [KafkaRecord("events", 0, i, MONTH_END, b"T", json.dumps(
        {"tenant": "T", "user": f"u{i}", "blob": WIDEST + "\uffff" * (100 + 37 * i)}, ensure_ascii=False).encode())
        for i in range(12)]
    outcome = both_paths(shared, NAMES, history, policy, job_step(policy, NAMES, 1), 1, random.Random(0))
    outcome.check()
    bodies = [body for *_, body in outcome.lambda_batches]
    assert len(bodies) > 2 and sum(len(json.loads(b)["members"]) for b in bodies) == 12
    assert all(escaped_bytes(b) <= 3_000 or len(json.loads(b)["members"]) == 1 for b in bodies)
    utf8 = dataclasses.replace(policy, measure_body=len)
    as_utf8 = both_paths(shared, NAMES, history, utf8, job_step(utf8, NAMES, 1), 1, random.Random(0))
    assert len(as_utf8.lambda_batches) < len(bodies)  # the measure, not the bytes as encoded, split them
