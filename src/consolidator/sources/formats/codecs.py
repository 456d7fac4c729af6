"""Schema text -> a reader of encoded values: Avro (fastavro), Protobuf (protobuf's dynamic
messages) and JSON Schema (jsonschema). A reader returns the JSON bytes of the value's document.

What the JSON document holds:

- Avro: the record as fastavro reads it with the writer's schema (the schema the value names),
  so a value written with a later schema version carries its new fields too; bytes and fixed
  become base64 text, decimals their decimal text, timestamps ISO-8601 text;
- Protobuf: every field of the message by its name in the ``.proto`` (not camelCase), scalars
  at their default when unset (proto3), unset message fields left out, integers as JSON
  numbers (64-bit ones too, unlike protobuf's own JSON mapping), enums by name, bytes base64;
- JSON Schema: the value itself, once it is valid JSON that its schema accepts.

A value that does not decode with its schema raises ``undecodable_value`` poison naming the
schema id; a schema that is not of the configured format, or that cannot be read, does too
(records of that schema can never be decoded by this configuration).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

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


def _json(document: object, schema_id: str) -> bytes:
    try:
        return orjson.dumps(document, default=_default)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise poison(PoisonReason.UNDECODABLE_VALUE, f"decoded value has no JSON form: {exc}", schema_id) from None


def build_reader(value_format: str, schema_id: str, schema: RegisteredSchema) -> Reader:
    """The reader of values written with ``schema``; poison when it is not a ``value_format``
    schema or cannot be read."""
    expected = SCHEMA_TYPES[value_format]
    if schema.schema_type != expected:
        raise poison(PoisonReason.UNDECODABLE_VALUE,
                     f"the schema is {schema.schema_type}, the configured value format is {value_format}", schema_id)
    build = {"avro": _avro_reader, "protobuf": _protobuf_reader, "json-schema": _json_schema_reader}[value_format]
    return build(schema_id, schema.text)


# -- Avro ------------------------------------------------------------------------------------

_AVRO_ERRORS = (EOFError, ValueError, IndexError, KeyError, TypeError, OverflowError, StopIteration)


def _avro_reader(schema_id: str, text: str) -> Reader:
    import fastavro

    try:
        parsed = fastavro.parse_schema(json.loads(text))
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as exc:
        raise poison(PoisonReason.UNDECODABLE_VALUE, f"the Avro schema cannot be read: {exc}", schema_id) from None
    read = fastavro.schemaless_reader

    def reader(frame: Frame) -> bytes:
        stream = io.BytesIO(frame.payload)
        try:
            document = read(stream, parsed, None)
        except _AVRO_ERRORS as exc:
            raise poison(PoisonReason.UNDECODABLE_VALUE,
                         f"not an Avro value of this schema: {type(exc).__name__}: {exc}", schema_id) from None
        rest = len(frame.payload) - stream.tell()
        if rest:
            raise poison(PoisonReason.UNDECODABLE_VALUE, f"{rest} bytes after the Avro value", schema_id)
        return _json(document, schema_id)

    return reader


# -- Protobuf --------------------------------------------------------------------------------


def _protobuf_reader(schema_id: str, text: str) -> Reader:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from google.protobuf.message import DecodeError

    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
        pool = descriptor_pool.DescriptorPool()  # one per schema: versions may reuse message names
        for dependency in proto.dependency:  # the well-known types only (google/protobuf/*.proto)
            known = descriptor_pool.Default().FindFileByName(dependency)
            dependency_proto = descriptor_pb2.FileDescriptorProto()
            known.CopyToProto(dependency_proto)
            pool.Add(dependency_proto)
        file = pool.Add(proto)
    except (binascii.Error, ValueError, KeyError, TypeError, DecodeError) as exc:
        raise poison(PoisonReason.UNDECODABLE_VALUE,
                     f"the Protobuf schema cannot be read (a serialized FileDescriptorProto whose imports are"
                     f" well-known types): {type(exc).__name__}: {exc}", schema_id) from None
    classes: dict[tuple[int, ...], Any] = {}

    def message_class(indexes: tuple[int, ...]) -> Any:
        cls = classes.get(indexes)
        if cls is None:
            try:
                descriptor = file.message_types_by_name[proto.message_type[indexes[0]].name]
                for index in indexes[1:]:
                    descriptor = descriptor.nested_types[index]
            except IndexError:
                raise poison(PoisonReason.UNDECODABLE_VALUE,
                             f"no message at index path {list(indexes)}", schema_id) from None
            cls = classes[indexes] = message_factory.GetMessageClass(descriptor)
        return cls

    def reader(frame: Frame) -> bytes:
        cls = message_class(frame.message_indexes or (0,))
        try:
            message = cls.FromString(frame.payload)
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise poison(PoisonReason.UNDECODABLE_VALUE,
                         f"not a Protobuf {cls.DESCRIPTOR.full_name}: {exc}", schema_id) from None
        return _json(_message_dict(message), schema_id)

    return reader


def _message_dict(message: Any) -> dict:
    document = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.is_repeated:
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                value_field = field.message_type.fields_by_name["value"]
                document[field.name] = {str(k): _scalar(value_field, v) for k, v in value.items()}
            else:
                document[field.name] = [_scalar(field, v) for v in value]
        elif field.has_presence and not message.HasField(field.name):
            continue
        else:
            document[field.name] = _scalar(field, value)
    return document


def _scalar(field: Any, value: Any) -> object:
    if field.message_type is not None:
        return _message_dict(value)
    if field.enum_type is not None:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else value
    return value


# -- JSON Schema -----------------------------------------------------------------------------


def _json_schema_reader(schema_id: str, text: str) -> Reader:
    import jsonschema

    try:
        schema = json.loads(text)
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(schema)
        validator = validator_class(schema)
    except (ValueError, TypeError, jsonschema.SchemaError) as exc:
        raise poison(PoisonReason.UNDECODABLE_VALUE, f"the JSON Schema cannot be read: {exc}", schema_id) from None

    def reader(frame: Frame) -> bytes:
        try:
            document = orjson.loads(frame.payload)
        except orjson.JSONDecodeError as exc:
            raise poison(PoisonReason.UNDECODABLE_VALUE, f"value is not JSON: {exc}", schema_id) from None
        error = jsonschema.exceptions.best_match(validator.iter_errors(document))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(the document)"
            raise poison(PoisonReason.UNDECODABLE_VALUE,
                         f"value does not match its JSON Schema at {where}: {error.message}", schema_id)
        return frame.payload

    return reader
