"""Decode and validate a Kafka record into an :class:`Event`.

Every poison case of SEMANTICS section 2 raises :class:`PoisonEvent` with a
machine-readable ``reason``; nothing else is raised for bad input.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import NamedTuple

import orjson

from consolidator.errors import ConsolidatorError

# Records, positions and events are NamedTuples: immutable, ordered like tuples, and several
# times cheaper to build than frozen dataclasses on the ingest hot path.

MAX_KEY_CHARS = 191  # fits a utf8mb4 VARCHAR in a unique index


class SourcePosition(NamedTuple):
    """Unique identity of a Kafka record. Ordering is lexicographic (topic, partition, offset)."""

    topic: str
    partition: int
    offset: int

    def sort_key(self) -> bytes:
        """Bytes that sort like the position; stored so SQL can compare positions in one column."""
        return self.topic.encode() + b"\x00" + struct.pack(">iq", self.partition, self.offset)

    def as_dict(self) -> dict[str, object]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}


class KafkaRecord(NamedTuple):
    """A record as it came off Kafka, before validation."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()

    @property
    def position(self) -> SourcePosition:
        return SourcePosition(self.topic, self.partition, self.offset)


@dataclass(frozen=True, slots=True)
class FieldNames:
    """Where the group key, item id and items live in the JSON value (configuration)."""

    group_key: str = "location_id"
    item_id: str = "order_id"
    items: str = "items"
    sku: str = "sku"
    quantity: str = "quantity"


class Event(NamedTuple):
    """A valid event. ``payload`` holds the original value bytes, untouched."""

    position: SourcePosition
    timestamp_ms: int
    group_key: str
    item_id: str
    items: tuple[tuple[str, int], ...]
    payload: bytes

    @property
    def bucket(self) -> int:
        return bucket_of(self.timestamp_ms)


class PoisonReason(StrEnum):
    TOO_LARGE = "too_large"
    EMPTY_VALUE = "empty_value"
    NOT_UTF8 = "not_utf8"
    NOT_JSON = "not_json"
    NOT_OBJECT = "not_object"
    MISSING_GROUP_KEY = "missing_group_key"
    MISSING_ITEM_ID = "missing_item_id"
    BAD_GROUP_KEY = "bad_group_key"
    BAD_ITEM_ID = "bad_item_id"
    BAD_ITEMS = "bad_items"
    BAD_QUANTITY = "bad_quantity"
    # the MSK envelope around the value (consolidator.msk)
    BAD_ENVELOPE = "bad_envelope"
    UNIDENTIFIABLE = "unidentifiable_record"
    BAD_EVENT = "bad_event"


class PoisonEvent(ConsolidatorError):
    """A record that can never become an event; it belongs in the dead-letter destination."""

    def __init__(self, reason: PoisonReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


DAY_MS = 86_400_000


@functools.lru_cache(maxsize=4096)
def _bucket_of_day(day: int) -> int:
    moment = datetime.fromtimestamp(day * 86_400, UTC)
    return moment.year * 100 + moment.month


def bucket_of(timestamp_ms: int) -> int:
    """Monthly partition bucket (YYYYMM, UTC) of a record timestamp; deterministic on replay.
    Months start on UTC day boundaries, so the month of the day is the month of the moment."""
    return _bucket_of_day(timestamp_ms // DAY_MS)


def months_after(bucket: int, months: int) -> int:
    """``bucket`` (YYYYMM) moved ``months`` forward (negative: backward)."""
    year, month = divmod(bucket, 100)
    index = year * 12 + (month - 1) + months
    return (index // 12) * 100 + index % 12 + 1


def _identifier(value: object, name: str, missing: PoisonReason, bad: PoisonReason) -> str:
    if type(value) is str and 0 < len(value) <= MAX_KEY_CHARS:
        return value  # the common case, checked first
    if value is None or value == "":
        raise PoisonEvent(missing, f"field {name!r} is missing or empty")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise PoisonEvent(bad, f"field {name!r} must be a string or an integer, got {type(value).__name__}")
    text = str(value)
    if len(text) > MAX_KEY_CHARS:
        raise PoisonEvent(bad, f"field {name!r} is longer than {MAX_KEY_CHARS} characters")
    return text


def _items(value: object, names: FieldNames) -> tuple[tuple[str, int], ...]:
    if value is None:
        return ()
    if type(value) is not list:
        raise PoisonEvent(PoisonReason.BAD_ITEMS, f"field {names.items!r} must be a list, got {type(value).__name__}")
    items = []
    for index, item in enumerate(value):
        if type(item) is not dict:
            raise PoisonEvent(PoisonReason.BAD_ITEMS, f"{names.items}[{index}] must be an object")
        sku = item.get(names.sku)
        quantity = item.get(names.quantity)
        # type() is not isinstance(): bool is an int subclass and never a quantity
        if type(sku) is not str or not sku:
            raise PoisonEvent(PoisonReason.BAD_ITEMS, f"{names.items}[{index}].{names.sku} must be a non-empty string")
        if type(quantity) is not int or quantity < 0:
            raise PoisonEvent(PoisonReason.BAD_QUANTITY,
                              f"{names.items}[{index}].{names.quantity} must be an integer >= 0, got {quantity!r}")
        items.append((sku, quantity))
    return tuple(items)


def _parse(value: bytes) -> object:
    """JSON bytes -> Python value (orjson: strict UTF-8, no NaN, no lone surrogates, depth <= 1024,
    integers beyond 64 bits read as floats)."""
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        try:
            value.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise PoisonEvent(PoisonReason.NOT_UTF8,
                              f"value is not UTF-8: {bad.reason} at byte {bad.start}") from None
        raise PoisonEvent(PoisonReason.NOT_JSON, f"value is not JSON: {exc}") from None


def decode(record: KafkaRecord, names: FieldNames, max_event_bytes: int) -> Event:
    """Validate ``record``; raise :class:`PoisonEvent` with the reason if it is poison."""
    value = record.value
    if not value:
        raise PoisonEvent(PoisonReason.EMPTY_VALUE, "record has no value (tombstone or empty)")
    if len(value) > max_event_bytes:
        raise PoisonEvent(PoisonReason.TOO_LARGE, f"value is {len(value)} bytes, limit is {max_event_bytes}")
    document = _parse(value)
    if type(document) is not dict:
        raise PoisonEvent(PoisonReason.NOT_OBJECT, f"value is a JSON {type(document).__name__}, not an object")
    get = document.get
    return Event(
        SourcePosition(record.topic, record.partition, record.offset),
        record.timestamp_ms,
        _identifier(get(names.group_key), names.group_key, PoisonReason.MISSING_GROUP_KEY, PoisonReason.BAD_GROUP_KEY),
        _identifier(get(names.item_id), names.item_id, PoisonReason.MISSING_ITEM_ID, PoisonReason.BAD_ITEM_ID),
        _items(get(names.items), names),
        value,
    )
