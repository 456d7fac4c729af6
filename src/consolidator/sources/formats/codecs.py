"""Schema text -> a reader of encoded values: Avro (:mod:`consolidator.sources.formats.avro`), Protobuf
(:mod:`consolidator.sources.formats.protobuf`) and JSON Schema (:mod:`consolidator.sources.formats.json_schema`).
A reader returns the JSON bytes of the value's document.

What the JSON document holds:

- Avro: the record as read with the writer's schema (the schema the value names), so a value
  written with a later schema version carries its new fields too; bytes and fixed become base64
  text, decimals their decimal text, timestamps ISO-8601 text;
- Protobuf: every field of the message by its name in the ``.proto`` (not camelCase), scalars
  at their default when unset (proto3), unset message fields left out, integers as JSON
  numbers (64-bit ones too, unlike protobuf's own JSON mapping), enums by name, bytes base64;
- JSON Schema: the value itself, once it is valid JSON that its schema accepts.

Every reader is bounded while it reads: a decoded document nests at most
:data:`~consolidator.sources.formats.limits.MAX_DECODED_DEPTH` containers, and a document whose JSON
would pass the event size cap is refused (``too_large``) before more than that is built.

A value that does not decode with its schema raises ``undecodable_value`` poison naming the
schema id; a schema that is not of the configured format, or that cannot be read, does too
(records of that schema can never be decoded by this configuration).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from decimal import Decimal

import orjson

from consolidator.rules.events import PoisonReason
from consolidator.sources.formats.base import RegisteredSchema, poison
from consolidator.sources.formats.wire import Frame

Reader = Callable[[Frame], bytes]
SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json-schema": "JSON"}


def _default(value: object) -> object:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def document_json(document: object, schema_id: str) -> bytes:
    """The JSON bytes of a decoded document (bytes as base64, decimals as text)."""
    try:
        return orjson.dumps(document, default=_default)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise poison(PoisonReason.UNDECODABLE_VALUE, f"decoded value has no JSON form: {exc}", schema_id) from None


def build_reader(value_format: str, schema_id: str, schema: RegisteredSchema, max_json_bytes: int) -> Reader:
    """The reader of values written with ``schema``, whose documents may have at most
    ``max_json_bytes`` of JSON (the event size cap); poison when it is not a ``value_format``
    schema or cannot be read."""
    expected = SCHEMA_TYPES[value_format]
    if schema.schema_type != expected:
        raise poison(PoisonReason.UNDECODABLE_VALUE,
                     f"the schema is {schema.schema_type}, the configured value format is {value_format}", schema_id)
    if value_format == "json-schema":
        from consolidator.sources.formats.json_schema import json_schema_reader

        read_json = json_schema_reader(schema_id, schema.text)
        return lambda frame: read_json(frame.payload)
    if value_format == "avro":
        from consolidator.sources.formats.avro import avro_document_reader

        read_avro = avro_document_reader(schema_id, schema.text)
        return lambda frame: document_json(read_avro(frame.payload, max_json_bytes), schema_id)
    from consolidator.sources.formats.protobuf import protobuf_document_reader

    read_protobuf = protobuf_document_reader(schema_id, schema.text)
    return lambda frame: document_json(read_protobuf(frame, max_json_bytes), schema_id)
