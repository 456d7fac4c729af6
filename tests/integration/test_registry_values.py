"""Hostile schemas and values through the real ingest handler: a registry's schemas are
producer input (Confluent's serializers register them on first use), so no schema and no value
may crash the function, run it out of memory or time, or make it fetch anything. Each case ends
as poison with its reason, dead-lettered, while the records around it are stored."""

from __future__ import annotations

import json

import pytest
from format_values import ORDER_V1, avro_body, confluent, order
from registry_handler import (
    dead_letters,
    handler_environment,
    invoke,
    invoke_in_child,
    load_handler,
)
from schema_registry import LocalSchemaRegistry
from support import record, sql

from consolidator.sources.formats import RegistryValueDecoder


@pytest.fixture
def registry():
    r = LocalSchemaRegistry()
    yield r
    r.stop()


@pytest.fixture
def dead_letter(tmp_path):
    return tmp_path / "dead-letter.jsonl"


@pytest.fixture
def handler(monkeypatch, registry, database_url, store, dead_letter):
    """The handler of a function whose values are Avro (``handler("json-schema")`` for another
    format), with its registry."""
    def load(value_format: str = "avro", **settings: str):
        for name, value in handler_environment(database_url, dead_letter, registry.url, value_format,
                                               **settings).items():
            monkeypatch.setenv(name, value)
        return load_handler()
    return load


def _varint(n: int) -> bytes:
    zigzag, out = (n << 1) ^ (n >> 63), bytearray()
    while zigzag > 0x7F:
        out.append(zigzag & 0x7F | 0x80)
        zigzag >>= 7
    return bytes([*out, zigzag])


def _avro_string(text: str) -> bytes:
    return _varint(len(text.encode())) + text.encode()


def _stored(store) -> list[str]:
    return [r["item_id"] for r in sql(store, "SELECT item_id FROM buffer_rows ORDER BY item_id")]


# -- Avro ------------------------------------------------------------------------------------

NODE = {"type": "record", "name": "Node", "fields": [
    {"name": "location_id", "type": "string"}, {"name": "order_id", "type": "string"},
    {"name": "next", "type": ["null", "Node"]}]}


def test_a_recursive_avro_schema_with_a_deeply_nested_value_is_poison_not_a_crash(registry, database_url, store,
                                                                                    dead_letter, tmp_path):
    node = registry.register("AVRO", json.dumps(NODE))
    good = registry.register("AVRO", json.dumps(ORDER_V1))
    # 20,000 levels: each an empty location and order id, then union branch 1 (another Node)
    deep = _avro_string("") * 2 + b"\x02"
    value = confluent(node, _avro_string("WH-1") + _avro_string("N1") + b"\x02" + deep * 20_000 + b"\x00\x00\x00")
    records = [record(0, value), record(1, confluent(good, avro_body(order("WH-1", "A2"))))]
    code, result, stderr = invoke_in_child(records, handler_environment(database_url, dead_letter, registry.url),
                                           tmp_path)
    assert code == 0, f"the function crashed (exit {code}): {stderr}"
    assert result["response"] == {"batchItemFailures": []}
    [entry] = dead_letters(dead_letter)
    assert (entry["reason"], entry["schema_id"]) == ("undecodable_value", str(node))
    assert "nests deeper than 100 " in entry["detail"]  # sources.formats.limits.MAX_DECODED_DEPTH
    assert _stored(store) == ["A2"]


def test_a_tiny_avro_value_declaring_10e8_items_is_refused_while_reading(registry, database_url, store,
                                                                         dead_letter, tmp_path):
    schema = {"type": "record", "name": "Order", "fields": [
        {"name": "location_id", "type": "string"}, {"name": "order_id", "type": "string"},
        {"name": "items", "type": {"type": "array", "items": "null"}}]}
    schema_id = registry.register("AVRO", json.dumps(schema))
    body = _avro_string("W") + _avro_string("O") + _varint(10**8) + b"\x00"
    assert len(body) == 9  # 14 bytes framed
    code, result, stderr = invoke_in_child([record(0, confluent(schema_id, body))],
                                           handler_environment(database_url, dead_letter, registry.url), tmp_path)
    assert code == 0, stderr
    assert result["peak_bytes"] < 32 * 1024 * 1024  # nothing near the 10^8 items was built
    [entry] = dead_letters(dead_letter)
    assert entry["reason"] == "too_large" and "stopped while reading" in entry["detail"]


def test_each_record_is_decoded_once_per_invocation_even_when_one_is_poison(handler, registry, monkeypatch, store):
    schema_id = registry.register("AVRO", json.dumps(ORDER_V1))
    decoded: list[bytes] = []
    to_json = RegistryValueDecoder.to_json

    def counted(self, value, *topic):
        decoded.append(value)
        return to_json(self, value, *topic)

    monkeypatch.setattr(RegistryValueDecoder, "to_json", counted)
    values = [confluent(schema_id, avro_body(order("WH-1", f"A{n}"))) for n in range(3)]
    values.insert(2, confluent(schema_id, b"\xff\xff"))  # poison: the pipelined path gives up there
    response = invoke(handler(), [record(offset, value) for offset, value in enumerate(values)])
    assert response == {"batchItemFailures": []}
    assert decoded == values
    assert _stored(store) == ["A0", "A1", "A2"]


# -- JSON Schema -------------------------------------------------------------------------------

ORDER_SCHEMA = {"type": "object", "required": ["location_id", "order_id"],
                "properties": {"location_id": {"type": "string"}, "order_id": {"type": "string"}}}


def _json_schema_records(registry, schema: dict, document: dict) -> list:
    """An order of a good schema, then ``document`` under ``schema``, then another good order."""
    good = registry.register("JSON", json.dumps(ORDER_SCHEMA))
    odd = registry.register("JSON", json.dumps(schema))
    return [record(0, confluent(good, json.dumps(order("WH-1", "A1")).encode())),
            record(1, confluent(odd, json.dumps(document).encode())),
            record(2, confluent(good, json.dumps(order("WH-1", "A3")).encode()))]


def _one_poison(dead_letter, store, reason: str = "undecodable_value") -> str:
    [entry] = dead_letters(dead_letter)
    assert entry["reason"] == reason and entry["source"]["offset"] == 1
    assert _stored(store) == ["A1", "A3"]
    return entry["detail"]


@pytest.mark.parametrize("target", ["{url}/remote.json", "file:///etc/hostname", "other.json#/x"])
def test_a_json_schema_ref_outside_the_schema_is_poison_and_nothing_is_fetched(handler, registry, dead_letter,
                                                                               store, target):
    schema = {**ORDER_SCHEMA, "properties": {"location_id": {"$ref": target.format(url=registry.url)}}}
    records = _json_schema_records(registry, schema, order("WH-1", "A2"))
    assert invoke(handler("json-schema"), records) == {"batchItemFailures": []}
    assert "points outside the schema" in _one_poison(dead_letter, store)
    assert not [p for p in registry.paths if "remote" in p]


@pytest.mark.parametrize("schema, why", [
    ({**ORDER_SCHEMA, "properties": {"location_id": {"$ref": "#/$defs/missing"}}}, "leads nowhere"),
    ({**ORDER_SCHEMA, "properties": {"location_id": {"$ref": "#/properties/location_id"}}}, "loop"),
], ids=["unresolvable", "self-reference"])
def test_a_json_schema_ref_that_leads_nowhere_is_poison(handler, registry, dead_letter, store, schema, why):
    records = _json_schema_records(registry, schema, order("WH-1", "A2"))
    assert invoke(handler("json-schema"), records) == {"batchItemFailures": []}
    assert why in _one_poison(dead_letter, store)


@pytest.mark.timeout(60)
def test_a_catastrophic_json_schema_pattern_is_evaluated_in_linear_time(handler, registry, dead_letter, store):
    schema = {**ORDER_SCHEMA, "properties": {"location_id": {"type": "string", "pattern": "^(a+)+$"}}}
    records = _json_schema_records(registry, schema, order("a" * 40 + "!", "A2"))
    assert invoke(handler("json-schema"), records) == {"batchItemFailures": []}
    assert "does not match '^(a+)+$'" in _one_poison(dead_letter, store)


def test_a_pattern_re2_cannot_run_makes_the_value_poison(handler, registry, dead_letter, store):
    schema = {**ORDER_SCHEMA, "patternProperties": {"^(?=loc)": {"type": "string"}}}
    records = _json_schema_records(registry, schema, order("WH-1", "A2"))
    assert invoke(handler("json-schema"), records) == {"batchItemFailures": []}
    assert "cannot run in linear time" in _one_poison(dead_letter, store)


@pytest.mark.timeout(60)
def test_a_json_schema_whose_references_multiply_its_work_is_poison(handler, registry, dead_letter, store):
    levels = {f"d{n}": {"allOf": [{"$ref": f"#/$defs/d{n + 1}"}, {"$ref": f"#/$defs/d{n + 1}"}]} for n in range(40)}
    schema = {**ORDER_SCHEMA, "$defs": {**levels, "d40": {"type": "object"}}, "allOf": [{"$ref": "#/$defs/d0"}]}
    records = _json_schema_records(registry, schema, order("WH-1", "A2"))
    assert invoke(handler("json-schema"), records) == {"batchItemFailures": []}
    assert "keyword evaluations" in _one_poison(dead_letter, store)
