"""The bounded readers and the lookup bookkeeping of consolidator.sources.formats: the Avro reader gives
fastavro's documents, its size count never refuses a document whose JSON fits the cap, the
Protobuf document is bounded while it is built, and the schema cache and the lookup budget keep
their limits."""

from __future__ import annotations

import base64
import io
import json
import string
from decimal import Decimal

import fastavro
import pytest
from format_values import order, order_proto, proto_order, proto_schema_text
from hypothesis import given, settings
from hypothesis import strategies as st

from consolidator.rules.events import PoisonEvent, PoisonReason
from consolidator.sources.formats.avro import avro_document_reader
from consolidator.sources.formats.base import LookupBudget, RegistryUnavailable, SchemaCache, poison
from consolidator.sources.formats.codecs import document_json
from consolidator.sources.formats.protobuf import protobuf_document_reader
from consolidator.sources.formats.wire import Frame

NAMES = st.text(string.ascii_letters, min_size=1, max_size=8)
EVERYTHING = {"type": "record", "name": "Everything", "namespace": "t", "fields": [
    {"name": "n", "type": "null"}, {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"},
    {"name": "l", "type": "long"}, {"name": "f", "type": "float"}, {"name": "d", "type": "double"},
    {"name": "by", "type": "bytes"}, {"name": "s", "type": "string"},
    {"name": "e", "type": {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN", "BLUE"]}},
    {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
    {"name": "arr", "type": {"type": "array", "items": ["null", "long", "string"]}},
    {"name": "m", "type": {"type": "map", "values": {"type": "array", "items": "Colour"}}},
    {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "next", "type": ["null", "Everything"], "default": None}]}
PARSED = fastavro.parse_schema(EVERYTHING)
READ = avro_document_reader("7", json.dumps(EVERYTHING))


def _everything(depth: int = 2):
    import datetime
    import uuid

    return st.fixed_dictionaries({
        "n": st.none(), "b": st.booleans(), "i": st.integers(-2**31, 2**31 - 1), "l": st.integers(-2**63, 2**63 - 1),
        "f": st.floats(width=32, allow_nan=False), "d": st.floats(allow_nan=False, allow_infinity=False),
        "by": st.binary(max_size=20), "s": st.text(max_size=20), "e": st.sampled_from(["RED", "GREEN", "BLUE"]),
        "fx": st.binary(min_size=4, max_size=4),
        "arr": st.lists(st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.text(max_size=5)), max_size=5),
        "m": st.dictionaries(NAMES, st.lists(st.sampled_from(["RED", "BLUE"]), max_size=3), max_size=3),
        "dec": st.decimals(min_value=-9999999, max_value=9999999, places=2, allow_nan=False, allow_infinity=False),
        "day": st.dates(), "ts": st.datetimes(min_value=datetime.datetime(1970, 1, 1), timezones=st.just(datetime.UTC)),
        "us": st.datetimes(min_value=datetime.datetime(1970, 1, 1), timezones=st.just(datetime.UTC)),
        "tm": st.times().map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)),
        "id": st.uuids().map(str) if depth else st.just(str(uuid.UUID(int=0))),
        "next": st.none() if depth == 0 else st.one_of(st.none(), st.deferred(lambda: _everything(depth - 1))),
    })


def _encode(document) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, PARSED, document)
    return out.getvalue()


@settings(max_examples=200, deadline=None)
@given(_everything())
def test_the_avro_reader_gives_fastavros_document_and_never_refuses_one_that_fits(document):
    payload = _encode(document)
    expected = document_json(fastavro.schemaless_reader(io.BytesIO(payload), PARSED, None), "7")
    assert document_json(READ(payload, len(expected)), "7") == expected  # a cap of exactly its JSON fits


def test_the_avro_decimal_is_its_decimal_text():
    document = json.loads(document_json(READ(_encode(_sample()), 10_000), "7"))
    assert document["dec"] == "12.34" and document["fx"] == base64.b64encode(b"abcd").decode()


def _sample() -> dict:
    import datetime

    return {"n": None, "b": True, "i": 1, "l": 2, "f": 1.5, "d": 2.5, "by": b"x", "s": "s", "e": "RED",
            "fx": b"abcd", "arr": [], "m": {}, "dec": Decimal("12.34"), "day": datetime.date(2026, 1, 2),
            "ts": datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC), "us": datetime.datetime(2026, 1, 2,
                                                                                             tzinfo=datetime.UTC),
            "tm": datetime.time(1, 2, 3), "id": "12345678-1234-5678-1234-567812345678", "next": None}


@pytest.mark.parametrize("body, reason, detail", [
    (b"\x02a\x02b" + b"\x80\x84\xaf\x5f" + b"\x00", "too_large", "stopped while reading"),  # 10^8 nulls
    (b"\x02a\x02b" + b"\x01\x00", "undecodable_value", "cut short"),  # a negative count, then no size
    (b"\x02a\x02b" + b"\x02" + b"\xff" * 11, "undecodable_value", "longer than 10 bytes"),
])
def test_a_hostile_avro_array_is_poison_at_once(body, reason, detail):
    schema = {"type": "record", "name": "O", "fields": [{"name": "a", "type": "string"},
                                                        {"name": "b", "type": "string"},
                                                        {"name": "items", "type": {"type": "array", "items": "null"}}]}
    with pytest.raises(PoisonEvent) as refused:
        avro_document_reader("3", json.dumps(schema))(body, 262_144)
    assert refused.value.reason == reason and detail in refused.value.detail


def test_an_avro_schema_nested_past_pythons_recursion_is_poison():
    text = '{"type":"array","items":' * 990 + '"long"' + "}" * 990
    with pytest.raises(PoisonEvent) as refused:
        avro_document_reader("4", text)(b"\x00", 1000)
    assert refused.value.reason == "undecodable_value"


# -- Protobuf ---------------------------------------------------------------------------------------


def test_an_empty_protobuf_message_of_many_fields_is_bounded_while_built():
    from google.protobuf import descriptor_pb2

    proto = descriptor_pb2.FileDescriptorProto(name="wide.proto", package="w", syntax="proto3")
    wide = proto.message_type.add(name="Wide")
    wide.field.add(name="rows", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                   label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED, type_name=".w.Wide.Row")
    row = wide.nested_type.add(name="Row")
    for n in range(500):
        row.field.add(name=f"column_{n:03d}", number=n + 1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    read = protobuf_document_reader("5", proto_schema_text(proto))
    payload = b"\x0a\x00" * 10_000  # 10,000 empty rows in 20 KB: 5 million default columns
    with pytest.raises(PoisonEvent) as refused:
        read(Frame("5", payload, (0,)), 262_144)
    assert refused.value.reason == "too_large" and "stopped while building" in refused.value.detail


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=10), st.integers(0, 2**62)), max_size=5), st.text(max_size=10))
def test_the_protobuf_count_never_refuses_a_document_that_fits(items, order_id):
    document = order("WH", order_id, items)
    read = protobuf_document_reader("6", proto_schema_text(order_proto()))
    frame = Frame("6", proto_order(document), (0,))
    expected = document_json(read(frame, 10**9), "6")
    assert document_json(read(frame, len(expected)), "6") == expected


# -- the cache and the budget ------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_schema_cache_keeps_its_bounds_and_forgets_the_least_recently_used():
    built: list[int] = []

    def build(key: int, seconds: float) -> str:
        built.append(key)
        if key < 0:
            raise poison(PoisonReason.UNKNOWN_SCHEMA, "no such id", str(key))
        return f"reader {key}"

    clock = Clock()
    cache = SchemaCache(build, now=clock, max_readers=3, max_failures=2)
    for key in (1, 2, 3, 1, 4):  # 1 was used again: 2 goes first
        cache.get(key)
    assert list(cache.readers) == [3, 1, 4] and built == [1, 2, 3, 4]
    for key in (-1, -2, -3):
        with pytest.raises(PoisonEvent):
            cache.get(key)
    assert list(cache.failures) == [-2, -3]
    with pytest.raises(PoisonEvent):
        cache.get(-3)  # remembered: no new fetch
    assert built == [1, 2, 3, 4, -1, -2, -3]


def test_the_lookup_budget_counts_times_and_stops_after_a_failure():
    clock = Clock()
    budget = LookupBudget(lookups=2, until=10.0, timeout_s=5.0, invocation=True, now=clock)
    assert budget.take() == 5.0
    clock.t = 7.0
    assert budget.take() == 3.0  # what is left of the invocation's share
    with pytest.raises(RegistryUnavailable, match="lookups are spent"):
        budget.take()
    budget = LookupBudget(lookups=5, until=10.0, timeout_s=5.0, invocation=True, now=clock)
    clock.t = 10.0
    with pytest.raises(RegistryUnavailable, match="time for schema registry lookups is spent"):
        budget.take()
    budget = LookupBudget(lookups=5, timeout_s=5.0, invocation=True, now=clock)
    budget.stop(RegistryUnavailable("503"))
    with pytest.raises(RegistryUnavailable, match="failed earlier in this invocation"):
        budget.take()
    spark = LookupBudget(timeout_s=5.0, now=clock)  # no invocation: only the per-lookup deadline
    spark.stop(RegistryUnavailable("503"))
    assert [spark.take() for _ in range(3)] == [5.0, 5.0, 5.0]
