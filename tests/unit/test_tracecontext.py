"""A record's W3C trace context is read from its headers; anything not valid is no context
(never an error, never poison)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consolidator.rules.events import FieldNames, KafkaRecord, decode, decode_exact
from consolidator.rules.tracecontext import (
    TraceContext,
    _trace_context,
    parse_traceparent,
    trace_context,
)

VALID = f"00-{'4bf92f3577b34da6a3ce929d0e0e4736'}-{'00f067aa0ba902b7'}-01"


@pytest.mark.parametrize("text", [
    VALID.upper(),  # lowercase hex only
    "ff" + VALID[2:],  # version ff is invalid
    f"00-{'0' * 32}-00f067aa0ba902b7-01",  # all-zero trace id
    f"00-4bf92f3577b34da6a3ce929d0e0e4736-{'0' * 16}-01",  # all-zero parent id
    VALID + "-extra",  # version 00 has exactly four fields
    VALID[:-1],
    "00-not-a-trace-context-01",
    "",
])
def test_an_invalid_traceparent_is_no_context(text):
    assert parse_traceparent(text) is None
    assert trace_context((("traceparent", text.encode()),)) is None


def test_a_later_version_is_read_as_version_00_allows():
    assert parse_traceparent("01" + VALID[2:] + "-more") == "01" + VALID[2:]
    assert parse_traceparent("01" + VALID[2:] + "more") is None


@pytest.mark.parametrize(("headers", "expected"), [
    ((("traceparent", VALID.encode()), ("tracestate", b"rojo=00f067aa0ba902b7")),
     TraceContext(VALID, "rojo=00f067aa0ba902b7")),
    ((("traceparent", VALID.encode()),), TraceContext(VALID)),
    ((("traceparent", VALID.encode()), ("tracestate", "caf\u00e9".encode())), TraceContext(VALID)),  # not ASCII
    ((("traceparent", VALID.encode()), ("tracestate", b"a=" + b"b" * 600)), TraceContext(VALID)),  # too long
    ((("traceparent", VALID.encode()), ("traceparent", VALID.encode())), None),  # repeated: ambiguous
    ((("traceparent", b"\xff\xfe"),), None),
    ((("tracestate", b"rojo=1"),), None),
    ((), None),
])
def test_trace_context_of_headers(headers, expected):
    assert trace_context(headers) == expected


@pytest.mark.parametrize("read", [decode, decode_exact])
def test_an_event_keeps_its_records_context_and_a_malformed_one_is_not_poison(read):
    value = b'{"location_id":"WH-1","order_id":"O1","items":[{"sku":"S","quantity":1}]}'
    good = KafkaRecord("orders", 0, 1, 0, None, value, (("traceparent", VALID.encode()),))
    bad = good._replace(headers=(("traceparent", b"garbage"),))
    assert read(good, FieldNames(), 10_000).trace == TraceContext(VALID)
    assert read(bad, FieldNames(), 10_000).trace is None
    assert read(good._replace(headers=()), FieldNames(), 10_000).trace is None


parents = st.sampled_from([VALID, VALID.upper(), "ff" + VALID[2:], "01" + VALID[2:], "01" + VALID[2:] + "-x",
                           VALID + "-x", f"00-{'0' * 32}-00f067aa0ba902b7-01", VALID[:-1], ""]).map(str.encode)
values = parents | st.builds(lambda v, i, b: v[:i] + bytes([b]) + v[i + 1:], parents, st.integers(0, 56),
                             st.integers(0, 255)) | st.binary(max_size=60)


@settings(max_examples=300, deadline=None)
@given(st.lists(values, min_size=1, max_size=6))
def test_a_traceparent_alone_reads_as_the_full_reading_also_repeated(sequence):
    for value in sequence + sequence:  # the last value read is remembered: a repeat reads the same
        headers = (("traceparent", value),)
        assert trace_context(headers) == _trace_context(headers)
    assert trace_context((("tracestate", b"a=1"),)) is None
