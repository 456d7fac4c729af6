"""The value-format seam: what every format decoder offers, the two failure classes, the schema
cache and the lookup budget.

A :class:`ValueDecoder` turns a record's value, as it came off Kafka in a registry format, into
the JSON bytes of the same document, which the JSON event parsing (:mod:`consolidator.rules.events`)
then validates like any JSON value. Its failures are kept apart:

- the value is poison (:class:`~consolidator.rules.events.PoisonEvent`, with ``schema_id`` set when the
  value names a schema): a frame that is not the registry's wire format (``bad_wire_format``), a
  schema id the registry does not give for the record's subjects (``unknown_schema``: unknown,
  registered under another subject, refused, or an answer that is not a schema), or bytes
  that do not decode with their schema, or a schema that cannot be used
  (``undecodable_value``). Such a record is dead-lettered;
- the registry cannot answer (:class:`RegistryUnavailable`): unreachable, too slow, throttling,
  failing, refusing the credentials, or an answer that is not the registry's API; or this
  invocation's lookups are spent. A dependency failure: the record is reported failed and
  retried, never dead-lettered.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from consolidator.rules.errors import ConsolidatorError
from consolidator.rules.events import PoisonEvent, PoisonReason
from consolidator.sources.formats.limits import (
    MAX_CACHED_SCHEMAS,
    MAX_REMEMBERED_FAILURES,
    RETRY_AFTER_SECONDS,
    SHOWN_SUBJECTS,
)


class RegistryUnavailable(ConsolidatorError):
    """The schema registry could not answer (network, deadline, throttling, 5xx, credentials
    refused, not the registry's API), or the invocation's lookups are spent. Not poison: the
    records that needed it are retried."""


class ValueDecoder(Protocol):
    """One value format. ``to_json`` never calls the registry for a schema it already has."""

    format: str

    def to_json(self, value: bytes, topic: str) -> bytes:
        """The JSON bytes of ``value``'s document (a record of ``topic``). Raises
        :class:`PoisonEvent` (with ``schema_id`` when known) or :class:`RegistryUnavailable`;
        nothing else for any input."""
        ...

    def begin_invocation(self) -> None:
        """A new invocation starts: its registry lookups are counted afresh."""
        ...


def poison(reason: PoisonReason, detail: str, schema_id: str | None = None) -> PoisonEvent:
    """A :class:`PoisonEvent` that names the value's schema id."""
    error = PoisonEvent(reason, detail if schema_id is None else f"schema {schema_id}: {detail}")
    error.schema_id = schema_id
    return error


def shown(subjects) -> str:
    """Subjects for a message: sorted, at most :data:`SHOWN_SUBJECTS`, each cut to 100 characters."""
    names = sorted(subjects)
    text = ", ".join(repr(name[:100]) for name in names[:SHOWN_SUBJECTS])
    return f"[{text}{f', ... ({len(names)} in all)' if len(names) > SHOWN_SUBJECTS else ''}]"


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry stores it: its type (AVRO, PROTOBUF, JSON) and its text (for
    Protobuf, the base64 of a serialized ``FileDescriptorProto``)."""

    schema_type: str
    text: str


@dataclass
class LookupBudget:
    """The registry lookups one invocation may still make: at most ``lookups`` of them, all
    ending by ``until`` (a ``time.monotonic`` instant; None: no end), each within
    ``timeout_s``. In an ``invocation``, none after a lookup the registry could not answer:
    asking it again would only spend the invocation's time. Outside one (a Spark task), only
    ``timeout_s`` applies."""

    lookups: int | None = None  # None: no count
    until: float | None = None
    timeout_s: float = 5.0
    invocation: bool = False
    now: Callable[[], float] = time.monotonic
    stopped: str | None = None  # why no lookup is made any more

    def take(self) -> float:
        """The seconds the next lookup may take; :class:`RegistryUnavailable` when none may be
        made (the record waits for the next invocation)."""
        if self.stopped is None and self.lookups is not None and self.lookups <= 0:
            self.stopped = "this invocation's schema registry lookups are spent (SCHEMA_REGISTRY_MAX_LOOKUPS)"
        left = self.timeout_s if self.until is None else min(self.timeout_s, self.until - self.now())
        if self.stopped is None and left <= 0:
            self.stopped = "this invocation's time for schema registry lookups is spent (half the function timeout)"
        if self.stopped is not None:
            raise RegistryUnavailable(f"{self.stopped}; the record waits for the next invocation")
        if self.lookups is not None:
            self.lookups -= 1
        return left

    def stop(self, error: RegistryUnavailable) -> None:
        if self.invocation:
            self.stopped = f"the schema registry failed earlier in this invocation ({error})"


K = TypeVar("K")
R = TypeVar("R")


@dataclass
class SchemaCache(Generic[K, R]):
    """Readers built from schemas, by key (schema id and allowed subjects): each is fetched and
    parsed once, and at most ``max_readers`` are kept (least recently used out first). A failed
    fetch (poison, registry down) is remembered for ``retry_after_s`` (at most
    ``max_failures`` of them) and raised again without a call, so a batch of records never
    makes one registry call per record. Each fetch takes its time from ``budget``; a spent
    budget is not a fact about the key and is not remembered."""

    build: Callable[[K, float], R]  # (key, seconds the lookup may take) -> reader
    retry_after_s: float = RETRY_AFTER_SECONDS
    now: Callable[[], float] = time.monotonic
    max_readers: int = MAX_CACHED_SCHEMAS
    max_failures: int = MAX_REMEMBERED_FAILURES
    budget: LookupBudget = field(default_factory=LookupBudget)
    readers: OrderedDict[K, R] = field(default_factory=OrderedDict)
    failures: OrderedDict[K, tuple[float, Exception]] = field(default_factory=OrderedDict)
    fetches: int = 0  # calls to ``build``: what the tests count

    def get(self, key: K) -> R:
        reader = self.readers.get(key)
        if reader is not None:
            self.readers.move_to_end(key)
            return reader
        failure = self.failures.get(key)
        if failure is not None and self.now() < failure[0]:
            raise failure[1].with_traceback(None)
        seconds = self.budget.take()
        self.fetches += 1
        try:
            reader = self.build(key, seconds)
        except (PoisonEvent, RegistryUnavailable) as error:
            if isinstance(error, RegistryUnavailable):
                self.budget.stop(error)
            _put(self.failures, key, (self.now() + self.retry_after_s, error), self.max_failures)
            raise
        self.failures.pop(key, None)
        _put(self.readers, key, reader, self.max_readers)
        return reader


def _put(cache: OrderedDict, key, value, limit: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)
