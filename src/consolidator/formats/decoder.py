"""A value format with its registry: frame -> schema (cached by id) -> JSON bytes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from consolidator.formats.base import RegisteredSchema, SchemaCache
from consolidator.formats.codecs import Reader, build_reader
from consolidator.formats.wire import Frame, confluent_frame, glue_frame

VALUE_FORMATS = ("json", "avro", "protobuf", "json-schema")


class SchemaSource(Protocol):
    def schema(self, schema_id: str, protobuf: bool) -> RegisteredSchema: ...


@dataclass
class RegistryValueDecoder:
    """Values in ``format`` (avro, protobuf, json-schema) framed for ``source``'s registry
    (``glue``: the Glue wire format; otherwise Confluent's). Each schema id is looked up and its
    reader built once per process; see :class:`SchemaCache` for failed lookups."""

    format: str
    source: SchemaSource
    glue: bool = False
    max_bytes: int = 6 * 1024 * 1024  # a Glue value decompresses to at most this
    cache: SchemaCache[str, Reader] = field(init=False)

    def __post_init__(self) -> None:
        protobuf = self.format == "protobuf"
        self.cache = SchemaCache(lambda schema_id: build_reader(
            self.format, schema_id, self.source.schema(schema_id, protobuf)))

    def frame(self, value: bytes) -> Frame:
        if self.glue:
            return glue_frame(value, self.max_bytes)
        return confluent_frame(value, protobuf=self.format == "protobuf")

    def to_json(self, value: bytes) -> bytes:
        frame = self.frame(value)
        return self.cache.get(frame.schema_id)(frame)
