"""A published batch carries its own ``traceparent`` in the message itself (so in the file sink's
line and the EventBridge detail too) when a member had a trace context: the first member's
trace, the span id of the batch's publish span (a function of the batch id), the same bytes on
every re-publish whether tracing is on or off; a consumer continues the trace from the message.
A batch without member contexts carries no field (its bytes are what they were)."""

from __future__ import annotations

import json

import jsonschema
import pymysql
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import get_current_span
from support import record
from test_flush import POLICY, ingest, make_service

from consolidator.rules.batch import load_schema, schema_name
from consolidator.rules.policy import FlushReason
from consolidator.rules.tracecontext import TraceContext
from consolidator.services.flush import FlushService
from consolidator.sinks import OutgoingBatch
from consolidator.sinks.eventbridge import EventBridgeSink, xray_header
from consolidator.support import tracing

TRACE_A, SPAN_A = "a" * 32, "1" * 16
TRACE_B, SPAN_B = "b" * 32, "2" * 16


def _records():
    """Group WH-1: a first member without a context, then A's, then B's; group WH-2: none."""
    return [
        record(1, location="WH-1", order="O1", key=b"WH-1"),
        record(2, location="WH-1", order="O2", key=b"WH-1")._replace(
            headers=(("traceparent", f"00-{TRACE_A}-{SPAN_A}-01".encode()),)),
        record(3, location="WH-1", order="O3", key=b"WH-1")._replace(
            headers=(("traceparent", f"00-{TRACE_B}-{SPAN_B}-01".encode()),)),
        record(4, location="WH-2", order="O4", key=b"WH-2"),
    ]


class FlakySink:
    """Refuses every batch of its first call; keeps what each call was given."""

    destination, messaging_system = "batches", "test"
    max_message_bytes = 1 << 20
    measure_body = staticmethod(len)

    def __init__(self) -> None:
        self.calls: list[list[OutgoingBatch]] = []

    def publish(self, batches):
        self.calls.append(list(batches))
        return {i: "down (test)" for i in range(len(batches))} if len(self.calls) == 1 else {}

    def close(self) -> None:
        pass


def test_a_republish_sends_the_same_bytes_and_its_span_has_the_same_id(store, clock, tmp_path, spans):
    ingest(store, clock, _records())
    clock.advance(POLICY.debounce_ms)
    sink = FlakySink()
    tracing.install(None)  # the first publish with tracing off: the bytes do not depend on it
    make_service(store, sink, clock, tmp_path).tick()
    first = {b.group_key: b for b in sink.calls[0]}
    tracing.install(spans_provider := TracerProvider())
    spans_provider.add_span_processor(SimpleSpanProcessor(spans))
    clock.advance(POLICY.tick_interval_ms)
    make_service(store, sink, clock, tmp_path).tick()
    second = {b.group_key: b for b in sink.calls[1]}
    assert {k: b.body for k, b in first.items()} == {k: b.body for k, b in second.items()}, \
        "a re-publish sends the same bytes"
    assert first["WH-1"].traceparent == second["WH-1"].traceparent, "and the same header"
    assert first["WH-2"].traceparent is None, "no member context, tracing off: no traceparent anywhere"

    traced, plain = json.loads(second["WH-1"].body), json.loads(second["WH-2"].body)
    span_id = traced["batch_id"][:16]
    assert traced["traceparent"] == f"00-{TRACE_A}-{span_id}-01" == second["WH-1"].traceparent
    assert traced["schema_minor"] == 3 and schema_name(traced) == "1.3"
    jsonschema.Draft202012Validator(load_schema("1.3"), format_checker=jsonschema.FormatChecker()).validate(traced)
    assert "traceparent" not in plain and "schema_minor" not in plain and schema_name(plain) == "1"
    (published,) = [s for s in spans.get_finished_spans() if s.attributes["consolidator.batch.group_key"] == "WH-1"]
    assert (published.context.trace_id, published.context.span_id) == (int(TRACE_A, 16), int(span_id, 16)), \
        "the message's traceparent names its publish span"


def test_the_eventbridge_detail_carries_it_and_a_consumer_continues_the_trace(store, clock, tmp_path, spans):
    sent = []

    class Client:
        def put_events(self, Entries):
            sent.extend(Entries)
            return {"Entries": [{"EventId": str(i)} for i in range(len(Entries))]}

    ingest(store, clock, _records())
    clock.advance(POLICY.debounce_ms)
    make_service(store, EventBridgeSink("bus", client=Client()), clock, tmp_path).tick()
    (entry,) = [e for e in sent if json.loads(e["Detail"])["group_key"] == "WH-1"]
    detail = json.loads(entry["Detail"])
    assert detail["traceparent"] == f"00-{TRACE_A}-{detail['batch_id'][:16]}-01"
    assert entry["TraceHeader"] == xray_header(detail["traceparent"])

    consumer = tracing.start_receive_span("bus", 0, 0, "consumers", detail["batch_id"], detail["traceparent"])
    consumer.end()
    (publish,) = [s for s in spans.get_finished_spans() if s.name == "send bus"
                  and s.attributes["consolidator.batch.group_key"] == "WH-1"]
    assert consumer.parent.span_id == publish.context.span_id and consumer.context.trace_id == int(TRACE_A, 16)
    continued = get_current_span(tracing.context_of(detail["traceparent"])).get_span_context()
    assert (continued.trace_id, continued.span_id) == (publish.context.trace_id, publish.context.span_id)


def test_a_dead_batch_entry_holds_the_message_as_published(store, clock, tmp_path):
    ingest(store, clock, _records())
    clock.advance(POLICY.debounce_ms)
    sink = FlakySink()  # refuses the first call: with one attempt allowed, both batches die
    make_service(store, sink, clock, tmp_path, max_attempts=1).tick()
    published = {b.group_key: json.loads(b.body) for b in sink.calls[0]}
    dead = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert {e["batch"]["group_key"]: e["batch"] for e in dead} == published
    assert "traceparent" in published["WH-1"]


@pytest.fixture
def statements(monkeypatch):
    """Every statement any cursor runs, as text, in order (a driver hook)."""
    ran: list[str] = []
    execute = pymysql.cursors.Cursor.execute

    def recording_execute(self, query, args=None):
        ran.append(" ".join((query if isinstance(query, str) else query.decode()).split()))
        return execute(self, query, args)

    monkeypatch.setattr(pymysql.cursors.Cursor, "execute", recording_execute)
    return ran


def _member_rows_read_again(ran: list[str]) -> list[str]:
    """The statements that read member rows through their batch rows (batches joined to buffer_rows)."""
    return [q for q in ran if q.upper().startswith("SELECT") and "batches" in q and "buffer_rows" in q]


class RefusingSink(FlakySink):
    """Refuses every batch of its first and third calls."""

    def publish(self, batches):
        self.calls.append(list(batches))
        return {i: "down (test)" for i in range(len(batches))} if len(self.calls) in (1, 3) else {}


class RefusingDeadLetter:
    """Refuses its first write; keeps the entries it confirmed."""

    def __init__(self) -> None:
        self.calls, self.entries = 0, []

    def send(self, entries):
        self.calls += 1
        if self.calls == 1:
            return set(range(len(entries)))
        self.entries.extend(entries)
        return set()


def test_the_members_trace_contexts_come_with_the_rows_the_flush_reads(store, clock, tmp_path, statements):
    """A publish derives the batch's traceparent from the contexts the claim (or the reload of a
    batch left CLAIMED) read with the members: no statement reads the members again through
    their batch rows, at the first publish, at a re-publish or when a reloaded batch dies."""
    ingest(store, clock, _records())
    clock.advance(POLICY.debounce_ms)
    sink, dead_letter = RefusingSink(), RefusingDeadLetter()

    def service(max_attempts: int) -> FlushService:
        return FlushService(store=store, sink=sink, dead_letter=dead_letter, policy=POLICY, clock=clock,
                            max_attempts=max_attempts)

    statements.clear()
    service(5).tick()  # claimed, refused by the sink
    first = {b.group_key: b for b in sink.calls[0]}
    assert _member_rows_read_again(statements) == [], "the claim's page read has the contexts"
    clock.advance(POLICY.tick_interval_ms)
    statements.clear()
    service(5).tick()  # reloaded, published
    second = {b.group_key: b for b in sink.calls[1]}
    assert _member_rows_read_again(statements) == [], "the reload's member read has them"
    span_id = json.loads(first["WH-1"].body)["batch_id"][:16]
    assert first["WH-1"].traceparent == second["WH-1"].traceparent == f"00-{TRACE_A}-{span_id}-01"
    assert {k: b.body for k, b in first.items()} == {k: b.body for k, b in second.items()}
    assert first["WH-2"].traceparent is None and "traceparent" not in json.loads(first["WH-2"].body)

    ingest(store, clock, [record(5, location="WH-3", order="O5", key=b"WH-3")._replace(
        headers=(("traceparent", f"00-{TRACE_B}-{SPAN_B}-01".encode()), ("tracestate", b"k=v")))])
    clock.advance(POLICY.debounce_ms)
    service(1).tick()  # refused by the sink, out of attempts, its dead-letter write refused: stays CLAIMED
    (published,) = sink.calls[2]
    assert dead_letter.entries == [] and published.traceparent.startswith(f"00-{TRACE_B}-")
    clock.advance(POLICY.tick_interval_ms)
    statements.clear()
    service(1).tick()  # reloaded out of attempts: dead-lettered, not published
    assert _member_rows_read_again(statements) == []
    assert len(sink.calls) == 3
    (entry,) = dead_letter.entries
    assert entry["batch"]["traceparent"] == published.traceparent
    assert entry["batch"] == json.loads(published.body)


def test_a_claim_and_a_reload_read_the_same_contexts_in_batch_order(store, clock):
    """The claim's page read and the reload of a CLAIMED batch give its members' contexts alike,
    batch order, a ``tracestate`` as stored (spaces and all), none for a member without one."""
    state = " k=v, other=x y "
    traced = [record(1, location="WH-1", order="O1", key=b"WH-1", partition=0),
              record(1, location="WH-1", order="O2", key=b"WH-1", partition=1)._replace(headers=(
                  ("traceparent", f"00-{TRACE_B}-{SPAN_B}-01".encode()), ("tracestate", state.encode()))),
              record(1, location="WH-1", order="O3", key=b"WH-1", partition=2)._replace(
                  headers=(("traceparent", f"00-{TRACE_A}-{SPAN_A}-00".encode()),))]
    for r in reversed(traced):  # first seen against position order: batch order is first seen
        ingest(store, clock, [r])
        clock.advance(1)
    claimed = store.claim("WH-1", FlushReason.IDLE, 10, clock.now_ms())
    assert claimed.trace_contexts == (TraceContext(f"00-{TRACE_A}-{SPAN_A}-00"),
                                      TraceContext(f"00-{TRACE_B}-{SPAN_B}-01", state))
    assert store.load_batch(claimed.batch_id).trace_contexts == claimed.trace_contexts
