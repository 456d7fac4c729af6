"""Protobuf values: a message of the schema's file (Confluent's message indexes pick which),
parsed by protobuf's runtime and turned into a document by field name.

Bounds: the runtime refuses messages nested deeper than 100 levels
(:data:`~consolidator.sources.formats.limits.MAX_DECODED_DEPTH` is that limit), and the document is
counted while it is built, as a lower bound of its JSON text: unset scalars appear at their
default, so a two-byte empty message of a type with many fields makes a large document, and the
build stops (``too_large``) as soon as the count passes the event size cap.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from consolidator.rules.events import PoisonReason
from consolidator.sources.formats.base import poison
from consolidator.sources.formats.wire import Frame


class _TooLarge(Exception):
    pass


class _Budget:
    """JSON bytes still allowed; every charge is at most what the JSON text will hold."""

    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left

    def spend(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise _TooLarge


def protobuf_document_reader(schema_id: str, text: str) -> Callable[[Frame, int], dict]:
    """``read(frame, max_json_bytes)``: the document of a Protobuf value of the schema ``text``
    (base64 of a serialized FileDescriptorProto whose imports are well-known types)."""
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
    except (binascii.Error, ValueError, KeyError, TypeError, DecodeError, RecursionError) as exc:
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

    def read(frame: Frame, max_json_bytes: int) -> dict:
        cls = message_class(frame.message_indexes or (0,))
        try:
            message = cls.FromString(frame.payload)
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise poison(PoisonReason.UNDECODABLE_VALUE,
                         f"not a Protobuf {cls.DESCRIPTOR.full_name}: {exc}", schema_id) from None
        try:
            return _message_dict(message, _Budget(max_json_bytes))
        except _TooLarge:
            raise poison(PoisonReason.TOO_LARGE, f"the Protobuf value decodes to more than {max_json_bytes} bytes"
                         " of JSON (stopped while building it)", schema_id) from None

    return read


def _message_dict(message: Any, budget: _Budget) -> dict:
    budget.spend(1)  # the braces, less the comma not written after the last member
    document = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.has_presence and not field.is_repeated and not message.HasField(field.name):
            continue
        budget.spend(len(field.name) + 4)  # "name": and a comma
        if not field.is_repeated:
            document[field.name] = _scalar(field, value, budget)
        elif field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            budget.spend(1)
            entries = {}
            for key, item in value.items():
                text = str(key)
                budget.spend(len(text) + 4)  # "key": and a comma
                entries[text] = _scalar(value_field, item, budget)
            document[field.name] = entries
        else:
            budget.spend(1 + len(value))  # the brackets, less one comma; a comma per item
            document[field.name] = [_scalar(field, item, budget) for item in value]
    return document


def _scalar(field: Any, value: Any, budget: _Budget) -> object:
    if field.message_type is not None:
        return _message_dict(value, budget)
    if field.enum_type is not None:
        known = field.enum_type.values_by_number.get(value)
        if known is not None:
            budget.spend(len(known.name) + 2)
            return known.name
    elif isinstance(value, str):
        budget.spend(len(value) + 2)
        return value
    elif isinstance(value, bytes):
        budget.spend(4 * ((len(value) + 2) // 3) + 2)
        return value
    budget.spend(1)
    return value
