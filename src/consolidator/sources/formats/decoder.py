"""A value format with its registry: frame -> schema (cached by id and allowed subjects) -> JSON
bytes."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from consolidator.sources.formats.base import LookupBudget, RegisteredSchema, SchemaCache
from consolidator.sources.formats.codecs import Reader, build_reader
from consolidator.sources.formats.wire import Frame, confluent_frame, glue_frame

VALUE_FORMATS = ("json", "avro", "protobuf", "json-schema")
MAX_EVENT_BYTES = 6 * 1024 * 1024  # the largest event size cap the settings allow


class SchemaSource(Protocol):
    def schema(self, schema_id: str, protobuf: bool, subjects: frozenset[str], timeout_s: float) -> RegisteredSchema:
        """The schema ``schema_id`` if it is registered under one of ``subjects``; poison if it
        is not (or not known), :class:`~consolidator.sources.formats.base.RegistryUnavailable` if the
        registry cannot say within ``timeout_s`` seconds."""
        ...


def default_subjects(topic: str, glue: bool) -> frozenset[str]:
    """The subjects a topic's values name by default: Confluent's TopicNameStrategy registers a
    value schema under ``<topic>-value``; Glue's serializers name the schema after the topic."""
    return frozenset({topic if glue else f"{topic}-value"})


@dataclass
class RegistryValueDecoder:
    """Values in ``format`` (avro, protobuf, json-schema) framed for ``source``'s registry
    (``glue``: the Glue wire format; otherwise Confluent's). A value's schema id is looked up
    once per process (a bounded cache, :class:`SchemaCache`) and only accepted when the
    registry has it under one of ``subjects`` (empty: each record's topic's default subject,
    :func:`default_subjects`). Lookups are counted per invocation (:meth:`begin_invocation`):
    at most ``max_lookups``, within ``lookup_seconds``, each within ``timeout_s``."""

    format: str
    source: SchemaSource
    glue: bool = False
    max_bytes: int = MAX_EVENT_BYTES  # the event size cap: what a value decompresses and decodes to at most
    subjects: tuple[str, ...] = ()
    timeout_s: float = 5.0
    max_lookups: int | None = None
    lookup_seconds: float | None = None
    now: Callable[[], float] = time.monotonic
    cache: SchemaCache[tuple[str, frozenset[str]], Reader] = field(init=False)

    def __post_init__(self) -> None:
        protobuf = self.format == "protobuf"

        def build(key: tuple[str, frozenset[str]], seconds: float) -> Reader:
            schema_id, subjects = key
            return build_reader(self.format, schema_id, self.source.schema(schema_id, protobuf, subjects, seconds),
                                self.max_bytes)

        self.cache = SchemaCache(build, now=self.now, budget=LookupBudget(timeout_s=self.timeout_s, now=self.now))

    def begin_invocation(self) -> None:
        until = None if self.lookup_seconds is None else self.now() + self.lookup_seconds
        self.cache.budget = LookupBudget(self.max_lookups, until, self.timeout_s, invocation=True, now=self.now)

    def frame(self, value: bytes) -> Frame:
        if self.glue:
            return glue_frame(value, self.max_bytes)
        return confluent_frame(value, protobuf=self.format == "protobuf")

    def to_json(self, value: bytes, topic: str) -> bytes:
        frame = self.frame(value)
        subjects = frozenset(self.subjects) if self.subjects else default_subjects(topic, self.glue)
        return self.cache.get((frame.schema_id, subjects))(frame)


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
    max_bytes: int = MAX_EVENT_BYTES
    subjects: tuple[str, ...] = ()
    max_lookups: int | None = None  # per invocation (ingest); None: no count (Spark)
    lookup_seconds: float | None = None  # per invocation: a share of the function's timeout

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
            source = ConfluentRegistry(self.registry_url, credentials)  # type: ignore[arg-type]
        return RegistryValueDecoder(self.value_format, source, glue=bool(self.glue_registry_name),
                                    max_bytes=self.max_bytes, subjects=self.subjects, timeout_s=self.timeout_s,
                                    max_lookups=self.max_lookups, lookup_seconds=self.lookup_seconds)

    def shared_decoder(self) -> RegistryValueDecoder:
        """One decoder per format and process (a Spark Python worker decodes many tasks' values
        with one schema cache)."""
        decoder = self._shared.get(self)
        if decoder is None:
            decoder = self._shared[self] = self.decoder()
        return decoder
