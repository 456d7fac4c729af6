"""An ingest reads each record's trace headers once, tracing on or off: the ingest span (its
parent and links) and the record's event (the context its row keeps) take the same reading."""

from __future__ import annotations

import pytest
from support import record, sql

from consolidator.rules import events
from consolidator.rules.events import FieldNames
from consolidator.services import spans as span_module
from consolidator.services.ingest import IngestService
from consolidator.sinks.deadletter import FileDeadLetter


def _parent(i: int) -> str:
    return f"00-{i + 1:032x}-{i + 1:016x}-01"


@pytest.fixture
def reads(monkeypatch) -> list[tuple]:
    """Every reading of a record's trace headers, wherever the ingest makes one."""
    found: list[tuple] = []
    for module in (events, span_module):
        read = module.trace_context

        def counted(headers, read=read):
            found.append(headers)
            return read(headers)

        monkeypatch.setattr(module, "trace_context", counted)
    return found


@pytest.mark.parametrize("tracing_on", [False, True], ids=["tracing off", "tracing on"])
def test_each_records_trace_headers_are_read_once(tracing_on, request, reads, store, clock, tmp_path):
    if tracing_on:
        exporter = request.getfixturevalue("spans")
    records = [record(1 + i, order=f"O{i}")._replace(headers=(("traceparent", _parent(i).encode()),))
               for i in range(6)]
    records.append(record(7, order="O6"))  # no headers: nothing to read
    records.append(record(8, b"not json")._replace(headers=(("traceparent", _parent(9).encode()),)))  # poison
    service = IngestService(store, FileDeadLetter(tmp_path / "dead.jsonl"), FieldNames(), 256 * 1024, clock)

    outcome = service.ingest(records)

    assert (outcome.stored, outcome.dead_lettered, outcome.failed) == (7, 1, [])
    assert len(reads) == (7 if tracing_on else 6), "each record with headers once (a poison one: when the span reads)"
    rows = {r["item_id"]: r["trace_parent"] for r in sql(store, "SELECT item_id, trace_parent FROM buffer_rows")}
    assert rows == {**{f"O{i}": _parent(i) for i in range(6)}, "O6": None}
    if tracing_on:
        (span,) = exporter.get_finished_spans()
        assert span.attributes["consolidator.trace.contexts"] == 7
        assert span.parent.trace_id == 1 and span.parent.span_id == 1
