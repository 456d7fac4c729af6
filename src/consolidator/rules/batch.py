"""The batch message: aggregation and the deterministic ``batch_id``.

Version 1 (the reference shape: quantity summed per sku, no member payload) stays byte for byte
what it was; a generic event shape (:mod:`consolidator.rules.shape`) gives version 2
(``schemas/batch-v2.schema.json``): named ``aggregates`` and, per member, its item id, position
and, when configured, its newest event.

``batch_id`` is a function of the group key, the members' source positions and their topics'
epochs only, so every engine, every retry and every replay of the same claim yields the same id.
The JSON Schema is ``schemas/batch-v1.schema.json``; minor versions add optional fields and say
so in ``schema_minor``: ``batch-v1.1.schema.json`` the ``held_back_ms`` of a rate-limited group,
``batch-v1.2.schema.json`` completion tracking (``completion_tracking``, ``ack_token``, each
member's item id), ``batch-v1.3.schema.json`` the batch's own ``traceparent``. Version 2's
minor version 2.1 (``batch-v2.1.schema.json``) adds the ``traceparent`` likewise. How a claim
becomes batches that fit the byte cap and the sums' bounds is :mod:`consolidator.rules.split`.

A batch sealed for completion tracking carries an ``ack_token``: an HMAC of its batch id under
the deployment's ack key (stored in the database, never in a message or a log). Only who
received the message knows it, so only a recipient can acknowledge the batch, although batch
ids are computable.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from types import MappingProxyType
from typing import NamedTuple

import orjson

from consolidator.rules.events import SourcePosition
from consolidator.rules.policy import FlushReason
from consolidator.rules.shape import (
    REFERENCE_SHAPE,
    EventView,
    Shape,
    aggregate,
    payload_of,
)
from consolidator.rules.tracecontext import TraceContext, batch_traceparent

SCHEMA_VERSION = 1
SCHEMA_VERSION_SHAPED = 2  # a generic event shape (schemas/batch-v2.schema.json)
SCHEMA_MINOR_HELD_BACK = 1  # v1.1: optional ``held_back_ms`` (schemas/batch-v1.1.schema.json)
SCHEMA_MINOR_TRACKED = 2  # v1.2: completion tracking and the ack token (schemas/batch-v1.2.schema.json)
SCHEMA_MINOR_TRACED = 3  # v1.3: the batch's own ``traceparent`` (schemas/batch-v1.3.schema.json)
SCHEMA_MINOR_SHAPED_TRACED = 1  # v2.1: the batch's own ``traceparent`` (schemas/batch-v2.1.schema.json)
_MINOR_NAMES = {SCHEMA_MINOR_HELD_BACK: "1.1", SCHEMA_MINOR_TRACKED: "1.2", SCHEMA_MINOR_TRACED: "1.3"}


class Member(NamedTuple):
    """One buffered row of a batch: the newest event for an item, and how many events it holds."""

    position: SourcePosition
    item_id: str
    items: tuple[tuple[str, int], ...] | EventView  # (sku, quantity) pairs, or what a generic shape keeps
    first_seen_ms: int
    last_update_ms: int
    merged_events: int = 1
    record_ts_ms: int | None = None  # record timestamp of the newest event (for the TTL)

    def order_key(self) -> tuple:
        """(first_seen, position): positions compare like their stored ``pos_key`` bytes."""
        return (self.first_seen_ms, self.position)


NO_EPOCHS: Mapping[str, int] = MappingProxyType({})  # every topic at epoch 0


ID_FORMAT = "consolidator-batch-v2"  # the first field of the text a batch id hashes: its version


def _field(text: str) -> str:
    """``text`` as a length-prefixed field, ``<bytes>:<text>``, the length that of its UTF-8 bytes."""
    return f"{len(text.encode())}:{text}"


def id_head(group_key: str, kind: str = "batch") -> bytes:
    """The start of the text :func:`batch_id` hashes: the format's version, the kind of record
    and the group key."""
    return f"{ID_FORMAT}{_field(kind)}{_field(group_key)}".encode()


def topic_fields(topic: str, epoch: int) -> str:
    """A position's first two fields in the text :func:`batch_id` hashes: its topic and the
    topic's epoch (the partition and offset fields follow)."""
    return _field(topic) + _field(str(epoch))


def id_of(head: bytes, positions: bytes) -> str:
    """The batch id of the text ``head`` (:func:`id_head`) then ``positions`` (the sorted
    positions' fields): 128 bits of its SHA-256, hex. The vectorised engines write ``positions``
    themselves (:func:`topic_fields`, then the partition and offset fields) and call this."""
    return hashlib.sha256(head + positions).hexdigest()[:32]


def batch_id(group_key: str, positions: Iterable[SourcePosition], epochs: Mapping[str, int] = NO_EPOCHS,
             kind: str = "batch") -> str:
    """128-bit hex id (v2) from the kind of record, the group key and the sorted member positions,
    each position with its topic's epoch (``epochs``, 0 when absent; ``consolidator offsets
    reset`` moves a topic's epoch). Every field is length-prefixed (``<bytes>:<UTF-8>``), so no
    two different inputs give the same text, whatever characters a group key holds.

    The hashed text is :data:`ID_FORMAT`, the kind and the group key (:func:`id_head`), then per
    position its topic, epoch (:func:`topic_fields`), partition and offset fields (:func:`id_of`).
    Sorted positions of one partition come together, so that partition's first three fields are
    formatted once for all of them (the claim computes this id for every flushed row)."""
    parts = []
    append = parts.append
    head, topic_of_head, partition_of_head = "", None, None
    for topic, partition, offset in sorted(positions):
        if partition != partition_of_head or topic != topic_of_head:
            head = topic_fields(topic, epochs.get(topic, 0)) + _field(str(partition))
            topic_of_head, partition_of_head = topic, partition
        digits = str(offset)
        append(f"{head}{len(digits)}:{digits}")
    return id_of(id_head(group_key, kind), "".join(parts).encode())


def ack_token(ack_key: bytes, batch_id: str) -> str:
    """The batch's ack token: 128 bits of HMAC-SHA256 of the batch id under ``ack_key``, hex.
    The same on every re-publish and in every engine (a function of the key and the id only)."""
    if len(ack_key) < 16:
        raise ValueError("an ack key has at least 16 bytes")
    return hmac.new(ack_key, f"consolidator-ack-v1\n{batch_id}".encode(), hashlib.sha256).hexdigest()[:32]


def ack_token_matches(ack_key: bytes, batch_id: str, token: object) -> bool:
    """Whether ``token`` is the ack token of ``batch_id``, compared in constant time."""
    if not isinstance(token, str):
        return False
    return hmac.compare_digest(ack_token(ack_key, batch_id).encode(), token.encode("utf-8", "replace"))


@functools.lru_cache(maxsize=65_536)
def _iso_seconds(epoch_s: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_s))


def iso_ms(epoch_ms: int) -> str:
    """UTC ISO-8601 with milliseconds, e.g. ``2026-11-18T14:13:20.000Z`` (exact integer arithmetic)."""
    seconds, millis = divmod(epoch_ms, 1000)
    return f"{_iso_seconds(seconds)}.{millis:03d}Z"


def pairs_of(items: tuple[tuple[str, int], ...] | EventView) -> tuple[tuple[str, int], ...]:
    """The (sku, quantity) pairs of a row; none for a row a generic shape stored."""
    return () if isinstance(items, EventView) else items


def view_of(items: tuple[tuple[str, int], ...] | EventView) -> EventView:
    """What a generic shape reads of a row; an empty event for a row the reference shape stored."""
    return items if isinstance(items, EventView) else EventView({})


def build_message(
    group_key: str, members: Sequence[Member], reason: FlushReason, flushed_at_ms: int,
    *, ack_key: bytes | None = None, held_back_ms: int = 0, epochs: Mapping[str, int] = NO_EPOCHS,
    assigned_id: str | None = None, shape: Shape = REFERENCE_SHAPE, event_times: bool = False,
    trace_contexts: Sequence[TraceContext | None] = (),
) -> dict:
    """The batch message, the one builder of every engine. Rows of the same item (one per
    monthly bucket) coalesce: the newest position's row counts.

    The reference shape (the default) gives version 1: quantities summed per sku across
    items, ``members`` the positions. ``ack_key`` (completion tracking on): the batch is sealed
    for completion tracking; the message says so, carries its ``ack_token`` (:func:`ack_token`),
    each ``members`` entry carries its item id (member i = i-th entry, what acks name by index),
    and ``schema_minor: 2`` (v1.2). A group held back by its rate limit adds ``held_back_ms`` and
    ``schema_minor: 1`` (v1.1, or 2 when tracked); every other message is exactly v1, so
    consumers of v1 see no change while no rate limit holds a group back and tracking is off.

    A generic event shape gives version 2: ``aggregates`` (each output of the shape over the
    newest event of each item, in source-position order) and every member (position order) with
    its item id and, when the shape carries a payload, its newest event (``event``). Optional
    fields: ``held_back_ms`` (no minor version), ``completion_tracking`` and ``ack_token``.

    ``assigned_id``: the id the batch was given when it was claimed (stored with it; ids once
    assigned never change, so a re-publish sends it as it is); without one, the id is computed
    from the members' positions and their topics' ``epochs`` (:func:`batch_id`). ``event_times``
    (an event time field is configured): ``first_event_at`` and ``last_event_at`` are the earliest
    and the latest event time of the members (:func:`event_span`), else the first and last time an
    event of the batch was ingested.

    ``trace_contexts``: the members' trace contexts in batch order (the flush reads them from
    the buffer; the Spark jobs have none). When one is there, the message carries the batch's own
    ``traceparent`` (:func:`~consolidator.rules.tracecontext.batch_traceparent`: a function of the
    batch, the same on every re-publish) and names version 1.3 (``schema_minor: 3``) or 2.1
    (``schema_minor: 1``); without one the message is what it was before, byte for byte."""
    if not members:
        raise ValueError("a batch needs at least one member")
    by_position = sorted(members, key=_position_of)
    newest = newest_per_item(members)
    message = {
        "batch_id": assigned_id if assigned_id is not None else batch_id(group_key, map(_position_of, by_position),
                                                                         epochs),
        "group_key": group_key,
        "flush_reason": str(reason),
        "item_ids": sorted(newest),
        "item_count": len(newest),
        "event_count": sum(m.merged_events for m in members),
        **event_span(members, event_times),
        "flushed_at": iso_ms(flushed_at_ms),
    }
    if shape.is_reference:
        quantities: dict[str, int] = {}
        for member in newest.values():
            for sku, quantity in pairs_of(member.items):
                quantities[sku] = quantities.get(sku, 0) + quantity
        message["schema_version"] = SCHEMA_VERSION
        message["items"] = [{"sku": sku, "quantity": quantities[sku]} for sku in sorted(quantities)]
        message["members"] = ([{**m.position.as_dict(), "item_id": m.item_id} for m in by_position]
                              if ack_key is not None else [m.position.as_dict() for m in by_position])
        if ack_key is not None or held_back_ms > 0:
            message["schema_minor"] = SCHEMA_MINOR_TRACKED if ack_key is not None else SCHEMA_MINOR_HELD_BACK
    else:
        events = [view_of(m.items).event for m in sorted(newest.values(), key=_position_of)]
        message["schema_version"] = SCHEMA_VERSION_SHAPED
        message["aggregates"] = aggregate(shape, events)
        message["members"] = [{**m.position.as_dict(), "item_id": m.item_id}
                              | ({"event": payload_of(view_of(m.items), shape)} if shape.carries_payload else {})
                              for m in by_position]
    if held_back_ms > 0:
        message["held_back_ms"] = held_back_ms
    if ack_key is not None:
        message["completion_tracking"] = True
        message["ack_token"] = ack_token(ack_key, message["batch_id"])
    traceparent = batch_traceparent(message["batch_id"], trace_contexts)
    if traceparent is not None:
        message["traceparent"] = traceparent
        message["schema_minor"] = SCHEMA_MINOR_TRACED if shape.is_reference else SCHEMA_MINOR_SHAPED_TRACED
    return message


def event_span(members: Sequence[Member], event_times: bool) -> dict[str, str]:
    """``first_event_at`` and ``last_event_at`` of a batch: with ``event_times``, the earliest and
    latest ``record_ts_ms`` (the event time ingest stored) of the members; else the earliest
    first-seen and the latest last-update time (when events of the batch were ingested)."""
    if event_times:
        stamps = [m.record_ts_ms for m in members if m.record_ts_ms is not None]
        if len(stamps) == len(members):
            return {"first_event_at": iso_ms(min(stamps)), "last_event_at": iso_ms(max(stamps))}
    return {"first_event_at": iso_ms(min(m.first_seen_ms for m in members)),
            "last_event_at": iso_ms(max(m.last_update_ms for m in members))}


def _position_of(member: Member) -> SourcePosition:
    return member.position


def newest_per_item(members: Sequence[Member]) -> dict[str, Member]:
    """Per item id, its member with the newest position: the rows a message counts."""
    newest: dict[str, Member] = {}
    for member in members:
        current = newest.get(member.item_id)
        if current is None or member.position > current.position:
            newest[member.item_id] = member
    return newest


def batch_aggregates(group_key: str, members: Sequence[Member], shape: Shape = REFERENCE_SHAPE) -> dict[str, object]:
    """What the message of a batch of ``members`` computes, by :func:`build_message` itself: the
    version 2 ``aggregates``, or for the reference shape its ``items`` under the
    default output's name (``{"items": [...]}``). For operators' views of a stored batch."""
    message = build_message(group_key, members, FlushReason.IDLE, 0, shape=shape)
    return {"items": message["items"]} if shape.is_reference else message["aggregates"]


def encode(message: dict) -> bytes:
    """Canonical JSON bytes (sorted keys, no spaces, UTF-8): equal messages give equal bytes."""
    try:
        return orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer beyond 64 bits (a huge summed quantity): same bytes, slower
        return json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def schema_name(message: dict) -> str:
    """The schema version a message names: ``"2.1"`` (version 2, ``schema_minor`` 1), ``"2"``,
    ``"1.3"`` (``schema_minor`` 3), ``"1.2"`` (``schema_minor`` 2), ``"1.1"`` (``schema_minor`` 1)
    or ``"1"``."""
    if message.get("schema_version") == SCHEMA_VERSION_SHAPED:
        return "2.1" if message.get("schema_minor") == SCHEMA_MINOR_SHAPED_TRACED else "2"
    return _MINOR_NAMES.get(message.get("schema_minor"), "1")  # type: ignore[arg-type]


def load_schema(version: str = "1") -> dict:
    """The JSON Schema of the message: ``"1"``, ``"1.1"`` (v1 plus the optional held-back field),
    ``"1.2"`` (v1.1 plus completion tracking), ``"1.3"`` (v1.2 plus the batch's ``traceparent``),
    ``"2"`` (a generic event shape) or ``"2.1"`` (v2 plus the batch's ``traceparent``);
    :func:`schema_name` names a message's."""
    return json.loads(resources.files("consolidator.schemas").joinpath(f"batch-v{version}.schema.json").read_text())
