"""A value format with its registry: frame -> schema (cached by id) -> JSON bytes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from consolidator.sources.formats.base import RegisteredSchema, SchemaCache
from consolidator.sources.formats.codecs import Reader, build_reader
from consolidator.sources.formats.wire import Frame, confluent_frame, glue_frame

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


@dataclass(frozen=True)
class ValueFormat:
    """A value format and its registry as the settings give them: small and picklable (a Spark
    job ships it to every executor, which then reads the registry's secret itself: no credentials
    in the job's arguments). The one way to build a :class:`RegistryValueDecoder`."""

    value_format: str  # avro, protobuf, json-schema
    registry_url: str | None = None  # a Confluent-compatible registry ...
    secret_arn: str | None = field(default=None, repr=False)  # ... and its credentials' secret
    glue_registry_name: str | None = None  # or the Glue Schema Registry
    timeout_s: float = 5.0
    max_bytes: int = 6 * 1024 * 1024

    _shared: ClassVar[dict[ValueFormat, RegistryValueDecoder]] = {}

    def decoder(self) -> RegistryValueDecoder:
        """A new decoder (its own schema cache); reads the registry's secret now."""
        source: SchemaSource
        if self.glue_registry_name:
            from consolidator.sources.formats.glue import GlueRegistry

            source = GlueRegistry(self.glue_registry_name, self.timeout_s)
        else:
            from consolidator.sources.formats.confluent import (
                ConfluentRegistry,
                credentials_from_secret,
            )
            from consolidator.support.aws_secrets import secret_string

            credentials = credentials_from_secret(secret_string(self.secret_arn)) if self.secret_arn else None
            source = ConfluentRegistry(self.registry_url, credentials, self.timeout_s)  # type: ignore[arg-type]
        return RegistryValueDecoder(self.value_format, source, glue=bool(self.glue_registry_name),
                                    max_bytes=self.max_bytes)

    def shared_decoder(self) -> RegistryValueDecoder:
        """One decoder per format and process (a Spark Python worker decodes many tasks' values
        with one schema cache)."""
        decoder = self._shared.get(self)
        if decoder is None:
            decoder = self._shared[self] = self.decoder()
        return decoder
