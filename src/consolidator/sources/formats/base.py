"""The value-format seam: what every format decoder offers and the two failure classes.

A :class:`ValueDecoder` turns a record's value, as it came off Kafka in a registry format, into
the JSON bytes of the same document, which the JSON event parsing (:mod:`consolidator.rules.events`)
then validates like any JSON value. Its failures are kept apart:

- the value is poison (:class:`~consolidator.rules.events.PoisonEvent`, with ``schema_id`` set when the
  value names a schema): a frame that is not the registry's wire format (``bad_wire_format``), a
  schema id the registry does not know (``unknown_schema``), or bytes that do not decode with
  their schema (``undecodable_value``). Such a record is dead-lettered;
- the registry cannot answer (:class:`RegistryUnavailable`): unreachable, throttling, failing,
  or refusing the credentials. A dependency failure: the record is reported failed and retried,
  never dead-lettered.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from consolidator.rules.errors import ConsolidatorError
from consolidator.rules.events import PoisonEvent, PoisonReason

# A failed schema lookup is remembered this long, so a registry outage costs one call per
# schema id and retry period, not one per record (and an unknown id one call per period).
RETRY_AFTER_SECONDS = 10.0


class RegistryUnavailable(ConsolidatorError):
    """The schema registry could not answer (network, throttling, 5xx, credentials refused).
    Not poison: the records that needed it are retried."""


class ValueDecoder(Protocol):
    """One value format. ``to_json`` never calls the registry for a schema it already has."""

    format: str

    def to_json(self, value: bytes) -> bytes:
        """The JSON bytes of ``value``'s document. Raises :class:`PoisonEvent` (with
        ``schema_id`` when known) or :class:`RegistryUnavailable`; nothing else for any input."""
        ...


def poison(reason: PoisonReason, detail: str, schema_id: str | None = None) -> PoisonEvent:
    """A :class:`PoisonEvent` that names the value's schema id."""
    error = PoisonEvent(reason, detail if schema_id is None else f"schema {schema_id}: {detail}")
    error.schema_id = schema_id
    return error


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry stores it: its type (AVRO, PROTOBUF, JSON) and its text (for
    Protobuf, the base64 of a serialized ``FileDescriptorProto``)."""

    schema_type: str
    text: str


K = TypeVar("K")
R = TypeVar("R")


@dataclass
class SchemaCache(Generic[K, R]):
    """Readers built from schemas, by schema id: each id is fetched and parsed once per process.
    A failed fetch (unknown id, registry down) is remembered for ``retry_after_s`` and raised
    again without a call, so a batch of records never makes one registry call per record."""

    build: Callable[[K], R]
    retry_after_s: float = RETRY_AFTER_SECONDS
    now: Callable[[], float] = time.monotonic
    readers: dict[K, R] = field(default_factory=dict)
    failures: dict[K, tuple[float, Exception]] = field(default_factory=dict)
    fetches: int = 0  # calls to ``build``: what the tests count

    def get(self, key: K) -> R:
        reader = self.readers.get(key)
        if reader is not None:
            return reader
        failure = self.failures.get(key)
        if failure is not None and self.now() < failure[0]:
            raise failure[1].with_traceback(None)
        self.fetches += 1
        try:
            reader = self.build(key)
        except (PoisonEvent, RegistryUnavailable) as error:
            self.failures[key] = (self.now() + self.retry_after_s, error)
            raise
        self.failures.pop(key, None)
        self.readers[key] = reader
        return reader
