"""Value formats (consolidator.sources.formats) against a local Confluent-compatible registry on
127.0.0.1 and moto's Glue: real Avro, Protobuf and JSON Schema encodings, the poison classes,
registry outages, schema caching and schema evolution."""

from __future__ import annotations

import json

import boto3
import pytest
from format_values import (
    ORDER_V1,
    ORDER_V2,
    avro_body,
    avro_serializer,
    confluent,
    glue,
    order,
    order_proto,
    proto_classes,
    proto_order,
    proto_schema_text,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws
from schema_registry import LocalSchemaRegistry
from support import record

from consolidator.rules.events import FieldNames, PoisonEvent, decode
from consolidator.sources.formats import RegistryUnavailable, RegistryValueDecoder, decode_event
from consolidator.sources.formats.confluent import ConfluentRegistry
from consolidator.sources.formats.glue import GlueRegistry

NAMES = FieldNames()
LIMIT = 256 * 1024


@pytest.fixture
def registry():
    r = LocalSchemaRegistry()
    yield r
    r.stop()


def decoder(registry: LocalSchemaRegistry, value_format: str = "avro") -> RegistryValueDecoder:
    return RegistryValueDecoder(value_format, ConfluentRegistry(registry.url), timeout_s=2)


def json_event(document: dict):
    """The event the JSON path builds for ``document``, without its payload."""
    return decode(record(0, json.dumps(document).encode()), NAMES, LIMIT)[:5]


def event(values, value: bytes):
    return decode_event(values, record(0, value), NAMES, LIMIT)[:5]


def poison_of(values, value: bytes) -> PoisonEvent:
    with pytest.raises(PoisonEvent) as caught:
        decode_event(values, record(0, value), NAMES, LIMIT)
    return caught.value


DOCUMENTS = [order(), order("WH-7", "B9", (("X", 0), ("Y", 2**40), ("X", 5))), order("L", "C", ())]


# -- the same event as the JSON path ------------------------------------------------------------


def test_avro_from_confluents_serializer_is_the_json_event(registry):
    serialize = avro_serializer(registry.url)
    values = decoder(registry)
    for document in DOCUMENTS:
        assert event(values, serialize(document)) == json_event(document)


def test_protobuf_is_the_json_event_with_64_bit_and_zero_quantities_as_numbers(registry):
    schema_id = registry.register("PROTOBUF", proto_schema_text(order_proto()))
    values = decoder(registry, "protobuf")
    for document in DOCUMENTS:
        assert event(values, confluent(schema_id, proto_order(document), b"\x00")) == json_event(document)


def test_protobuf_message_indexes_pick_a_nested_message(registry):
    schema_id = registry.register("PROTOBUF", proto_schema_text(order_proto()))
    _, item_class = proto_classes(order_proto())
    body = item_class(sku="S", quantity=3).SerializeToString()
    # indexes [0, 0]: count 2, then 0 and 0 (zigzag varints) -> shop.Order.Item
    assert json.loads(decoder(registry, "protobuf").to_json(confluent(schema_id, body, b"\x04\x00\x00"), "orders")) == {
        "sku": "S", "quantity": 3}


def test_json_schema_value_is_the_json_event_and_a_violation_is_poison(registry):
    schema = {"type": "object", "required": ["order_id"], "properties": {"order_id": {"type": "string"}}}
    schema_id = registry.register("JSON", json.dumps(schema))
    values = decoder(registry, "json-schema")
    for document in DOCUMENTS:
        assert event(values, confluent(schema_id, json.dumps(document).encode())) == json_event(document)
    error = poison_of(values, confluent(schema_id, json.dumps({"order_id": 7}).encode()))
    assert (error.reason, error.schema_id) == ("undecodable_value", str(schema_id))
    assert "order_id" in error.detail


# -- poison: its own reasons, with the schema id -------------------------------------------------


def test_plain_json_on_an_avro_topic_is_bad_wire_format(registry):
    error = poison_of(decoder(registry), json.dumps(order()).encode())
    assert (error.reason, error.schema_id) == ("bad_wire_format", None)
    assert "first byte 123" in error.detail


def test_unknown_schema_id_is_poison_naming_it_and_asked_once(registry):
    values = decoder(registry)
    for _ in range(5):
        error = poison_of(values, confluent(99, avro_body(order())))
        assert (error.reason, error.schema_id) == ("unknown_schema", "99")
    assert registry.gets[99] == 1


@pytest.mark.parametrize("body, what", [
    (lambda b: b[:-3], "cut short"),
    (lambda b: b + b"\x00\x01", "bytes after the Avro value"),
    (lambda b: b"\xff" * 12, "garbage"),
])
def test_undecodable_avro_is_poison_naming_the_schema(registry, body, what):
    schema_id = registry.register("AVRO", json.dumps(ORDER_V1))
    error = poison_of(decoder(registry), confluent(schema_id, body(avro_body(order()))))
    assert (error.reason, error.schema_id) == ("undecodable_value", str(schema_id)), what


def test_undecodable_protobuf_and_a_schema_of_another_format_are_poison(registry):
    proto_id = registry.register("PROTOBUF", proto_schema_text(order_proto()))
    error = poison_of(decoder(registry, "protobuf"), confluent(proto_id, b"\x0a\xff\xff\xff", b"\x00"))
    assert (error.reason, error.schema_id) == ("undecodable_value", str(proto_id))
    error = poison_of(decoder(registry, "avro"), confluent(proto_id, avro_body(order())))
    assert error.reason == "undecodable_value" and "PROTOBUF" in error.detail


def test_a_value_over_the_size_cap_is_too_large_before_any_lookup(registry):
    error = poison_of(decoder(registry), confluent(1, b"\x00" * (LIMIT + 1)))
    assert error.reason == "too_large" and not registry.gets


# -- caching, outages, evolution --------------------------------------------------------------


def test_each_schema_is_looked_up_once_for_many_records(registry):
    serialize, values = avro_serializer(registry.url), decoder(registry)
    for n in range(200):
        event(values, serialize(order(order_id=f"O{n}")))
    assert dict(registry.gets) == {1: 1}


@pytest.mark.parametrize("outage", ["503", "429", "down"])
def test_an_unavailable_registry_is_a_dependency_failure_not_poison(registry, outage):
    serialize, values = avro_serializer(registry.url), decoder(registry)
    known = serialize(order())
    event(values, known)  # schema 1 is cached
    new_schema = registry.register("AVRO", json.dumps(ORDER_V2))
    if outage == "down":
        registry.stop()
    else:
        registry.status = int(outage)
    value = confluent(new_schema, avro_body(order(channel="app"), ORDER_V2))
    for _ in range(3):
        with pytest.raises(RegistryUnavailable):
            decode_event(values, record(1, value), NAMES, LIMIT)
    assert event(values, known) == json_event(order())  # what is cached still decodes
    if outage != "down":
        assert registry.gets[new_schema] <= 2  # the client's one retry, then remembered: not per record
        registry.status = None
        values.cache.retry_after_s = 0
        values.cache.failures.clear()
        assert event(values, value) == json_event(order())


def test_schema_evolution_a_field_added_by_a_later_version(registry):
    v1, v2 = avro_serializer(registry.url, ORDER_V1), avro_serializer(registry.url, ORDER_V2)
    values = decoder(registry)
    old, new = v1(order()), v2(order(channel="app"))
    assert old[1:5] != new[1:5]  # two schema ids
    assert event(values, old) == event(values, new) == json_event(order())
    assert json.loads(values.to_json(new, "orders"))["channel"] == "app"
    assert sorted(registry.gets.values()) == [1, 1]


# -- the Glue Schema Registry (moto) -------------------------------------------------------------


@pytest.fixture
def glue_registry():
    with mock_aws():
        client = boto3.client("glue", region_name="eu-west-1")
        client.create_registry(RegistryName="shop")
        client.create_registry(RegistryName="other")
        yield client


def _glue_version(client, registry: str, schema: dict) -> str:
    return client.create_schema(RegistryId={"RegistryName": registry}, SchemaName="orders",
                                DataFormat="AVRO", Compatibility="BACKWARD",
                                SchemaDefinition=json.dumps(schema))["SchemaVersionId"]


def test_glue_avro_plain_and_zlib_is_the_json_event(glue_registry):
    version = _glue_version(glue_registry, "shop", ORDER_V1)
    values = RegistryValueDecoder("avro", GlueRegistry("shop", client=glue_registry), glue=True, max_bytes=LIMIT)
    for document in DOCUMENTS:
        body = avro_body(document)
        assert event(values, glue(version, body)) == event(values, glue(version, body, True)) == json_event(document)


def test_glue_unknown_version_other_registry_and_bad_frames_are_poison(glue_registry):
    other = _glue_version(glue_registry, "other", ORDER_V1)
    values = RegistryValueDecoder("avro", GlueRegistry("shop", client=glue_registry), glue=True, max_bytes=LIMIT)
    unknown = "12345678-1234-1234-1234-123456789012"
    error = poison_of(values, glue(unknown, avro_body(order())))
    assert (error.reason, error.schema_id) == ("unknown_schema", unknown)
    error = poison_of(values, glue(other, avro_body(order())))
    assert (error.reason, error.schema_id) == ("unknown_schema", other) and "'other'" in error.detail
    assert poison_of(values, confluent(1, avro_body(order()))).reason == "bad_wire_format"
    assert poison_of(values, glue(unknown, b"x")[:1] + b"\x07" + glue(unknown, b"x")[2:]).reason == "bad_wire_format"
    bomb = glue(unknown, b"\x00" * (LIMIT * 4), compress=True)
    assert len(bomb) < LIMIT and poison_of(values, bomb).reason == "too_large"


def test_glue_unreachable_is_a_dependency_failure():
    client = boto3.client("glue", region_name="eu-west-1", endpoint_url="http://127.0.0.1:9",
                          aws_access_key_id="x", aws_secret_access_key="x")
    values = RegistryValueDecoder("avro", GlueRegistry("shop", timeout_s=1, client=client), glue=True)
    with pytest.raises(RegistryUnavailable):
        values.to_json(glue("12345678-1234-1234-1234-123456789012", avro_body(order())), "orders")


# -- any bytes: an event or poison, nothing else ---------------------------------------------------


@pytest.fixture(scope="module")
def every_format():
    r = LocalSchemaRegistry()
    ids = {"avro": r.register("AVRO", json.dumps(ORDER_V2)),
           "protobuf": r.register("PROTOBUF", proto_schema_text(order_proto())),
           "json-schema": r.register("JSON", json.dumps({"type": "object"}))}
    yield r, ids
    r.stop()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value_format=st.sampled_from(["avro", "protobuf", "json-schema"]), body=st.binary(max_size=64),
       indexes=st.sampled_from([b"", b"\x00", b"\x02\x00", b"\x04\x02\x00", b"\x7f", b"\x02\x01"]))
def test_any_bytes_after_a_known_schema_id_are_an_event_or_poison(every_format, value_format, body, indexes):
    registry, ids = every_format
    values = _decoders(registry.url)[value_format]
    value = confluent(ids[value_format], (indexes if value_format == "protobuf" else b"") + body)
    try:
        decode_event(values, record(0, value), NAMES, LIMIT)
    except PoisonEvent as error:
        assert error.reason in {"undecodable_value", "bad_wire_format", "not_object", "missing_group_key",
                                "missing_item_id", "bad_group_key", "bad_item_id", "bad_items", "bad_quantity"}


_DECODERS: dict[str, dict] = {}


def _decoders(url: str) -> dict:
    if url not in _DECODERS:
        _DECODERS[url] = {f: RegistryValueDecoder(f, ConfluentRegistry(url), timeout_s=2)
                          for f in ("avro", "protobuf", "json-schema")}
    return _DECODERS[url]
