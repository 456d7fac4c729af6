"""The real ingest and flush handlers with tracing on (an in-memory exporter): a producer's trace
context goes into the buffer row, the ingest span and the publish span continue it and link to
every record's and member's context, and the published message (here a file sink's line)
carries its batch's ``traceparent``, which names the publish span. Records without trace headers or with a malformed ``traceparent`` are ingested
as any other (never poison) and add no link."""

from __future__ import annotations

import json
import time

import pytest
import redis
from opentelemetry.trace import SpanKind
from support import REDIS_URL, order_value, sql
from test_ingest_handler import load_handler

from consolidator.demo.lambda_context import LocalLambdaContext
from consolidator.rules.events import KafkaRecord
from consolidator.sources.msk import event_from_records
from consolidator.support import tracing

TRACE_A, SPAN_A = "a" * 32, "1" * 16
TRACE_B, SPAN_B = "b" * 32, "2" * 16
PARENT_A = f"00-{TRACE_A}-{SPAN_A}-01"
PARENT_B = f"00-{TRACE_B}-{SPAN_B}-01"


@pytest.fixture
def env(monkeypatch, database_url, store, tmp_path):
    for name, value in {
        "CONSOLIDATOR_DATABASE_URL": database_url, "CONSOLIDATOR_REDIS_URL": REDIS_URL,
        "CONSOLIDATOR_SINK_URL": f"file://{tmp_path}/batches.jsonl",
        "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{tmp_path}/dead-letter.jsonl",
        "CONSOLIDATOR_DEBOUNCE_SECONDS": "0.1", "CONSOLIDATOR_TICK_INTERVAL_SECONDS": "0.25",
        "CONSOLIDATOR_LOCK_TTL_SECONDS": "5", "CONSOLIDATOR_LOCK_KEY": "consolidator:tracing-test-lock",
        "POWERTOOLS_METRICS_NAMESPACE": "Consolidator",
    }.items():
        monkeypatch.setenv(name, value)
    yield tmp_path
    redis.Redis.from_url(REDIS_URL).delete("consolidator:tracing-test-lock")


def _record(offset: int, order: str, headers=()) -> KafkaRecord:
    return KafkaRecord("orders", 0, offset, int(time.time() * 1000), b"WH-1",
                       order_value(location="WH-1", order=order), tuple(headers))


def test_a_producer_trace_continues_through_ingest_and_publish_to_the_message(env, spans, store):
    records = [
        _record(10, "O1", [("traceparent", PARENT_A.encode()), ("tracestate", b"vendor=1")]),
        _record(11, "O2"),  # no trace headers
        _record(12, "O3", [("traceparent", b"00-not-a-trace-context-01")]),  # malformed: ignored
        _record(13, "O1", [("traceparent", PARENT_B.encode())]),  # newer event of O1: its context wins
        _record(14, "O4", [("traceparent", PARENT_A.encode())]),
    ]
    ingest = load_handler("ingest")
    assert ingest.handler(event_from_records(records), LocalLambdaContext()) == {"batchItemFailures": []}
    assert not (env / "dead-letter.jsonl").exists(), "a malformed traceparent is never poison"
    rows = {r["item_id"]: (r["trace_parent"], r["trace_state"])
            for r in sql(store, "SELECT item_id, trace_parent, trace_state FROM buffer_rows")}
    assert rows == {"O1": (PARENT_B, None), "O2": (None, None), "O3": (None, None), "O4": (PARENT_A, None)}

    (ingested,) = spans.get_finished_spans()
    assert ingested.name == "process orders" and ingested.kind is SpanKind.CONSUMER
    assert ingested.parent.trace_id == int(TRACE_A, 16) and ingested.parent.span_id == int(SPAN_A, 16)
    assert ingested.context.trace_id == int(TRACE_A, 16), "the first record's trace continues into its ingest"
    assert {(link.context.trace_id, link.context.span_id) for link in ingested.links} == {
        (int(TRACE_A, 16), int(SPAN_A, 16)), (int(TRACE_B, 16), int(SPAN_B, 16))}
    assert dict(ingested.attributes) == {
        "messaging.system": "kafka", "messaging.operation.type": "process", "messaging.operation.name": "ingest",
        "messaging.destination.name": "orders", "messaging.destination.partition.id": "0",
        "messaging.batch.message_count": 5, "consolidator.trace.contexts": 2,
        "consolidator.ingest.stored": 5, "consolidator.ingest.dead_lettered": 0, "consolidator.ingest.failed": 0,
    }
    spans.clear()

    time.sleep(0.2)  # past the debounce
    flush = load_handler("flush")
    result = flush.handler({}, LocalLambdaContext(timeout_ms=1_000))
    assert result["published"] == 1
    (message,) = [json.loads(line) for line in (env / "batches.jsonl").read_text().splitlines()]
    published = [s for s in spans.get_finished_spans() if s.name.startswith("send ")]
    assert len(published) == 1
    span = published[0]
    assert span.name == "send batches.jsonl" and span.kind is SpanKind.PRODUCER
    assert span.parent.trace_id == int(TRACE_B, 16), "the batch's first member with a context is the parent"
    assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [
        (int(TRACE_B, 16), int(SPAN_B, 16)), (int(TRACE_A, 16), int(SPAN_A, 16))]
    attributes = dict(span.attributes)
    assert attributes["consolidator.batch.id"] == message["batch_id"] == attributes["messaging.message.id"]
    assert attributes["consolidator.batch.group_key"] == "WH-1"
    assert attributes["consolidator.batch.size"] == 4
    assert attributes["consolidator.batch.flush_reason"] == "idle"
    assert attributes["consolidator.batch.wait_ms"] >= 100
    assert attributes["consolidator.trace.contexts"] == 2 and attributes["messaging.system"] == "file"
    assert message["traceparent"] == f"00-{TRACE_B}-{message['batch_id'][:16]}-01", "the file sink's line carries it"
    assert (span.context.trace_id, span.context.span_id) == (int(TRACE_B, 16), int(message["batch_id"][:16], 16))
    consumer = tracing.start_receive_span("batches", 0, 0, "consumers", message["batch_id"], message["traceparent"])
    consumer.end()
    assert consumer.parent.span_id == span.context.span_id and consumer.context.trace_id == int(TRACE_B, 16)


def test_links_are_bounded_and_the_count_is_kept(env, spans, store):
    records = [_record(100 + i, f"O{i}", [("traceparent", f"00-{i + 1:032x}-{i + 1:016x}-01".encode())])
               for i in range(tracing.MAX_LINKS + 5)]
    ingest = load_handler("ingest")
    assert ingest.handler(event_from_records(records), LocalLambdaContext()) == {"batchItemFailures": []}
    (ingested,) = spans.get_finished_spans()
    assert len(ingested.links) == tracing.MAX_LINKS
    assert ingested.attributes["consolidator.trace.contexts"] == tracing.MAX_LINKS + 5


def test_without_an_exporter_no_span_is_made_and_the_row_keeps_the_context(env, store, monkeypatch):
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    assert tracing.configure("consolidator-test") is False and tracing.tracer() is None
    ingest = load_handler("ingest")
    event = event_from_records([_record(1, "O1", [("traceparent", PARENT_A.encode())])])
    assert ingest.handler(event, LocalLambdaContext()) == {"batchItemFailures": []}
    assert sql(store, "SELECT trace_parent FROM buffer_rows") == [{"trace_parent": PARENT_A}]


def test_the_ingest_span_names_the_event_source_mappings_consumer_group(env, spans, store, monkeypatch):
    monkeypatch.setenv("CONSOLIDATOR_CONSUMER_GROUP", "consolidator-ingest")  # what the stack sets
    ingest = load_handler("ingest")
    event = event_from_records([_record(1, "O1", [("traceparent", PARENT_A.encode())])])
    assert ingest.handler(event, LocalLambdaContext()) == {"batchItemFailures": []}
    (ingested,) = spans.get_finished_spans()
    assert ingested.attributes["messaging.consumer.group.name"] == "consolidator-ingest"
