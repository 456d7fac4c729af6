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
minor version 2.1 (``batch-v2.1.schema.json``) adds the ``traceparent`` likewise.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import NamedTuple

import orjson

from consolidator.rules.events import MAX_QUANTITY, SourcePosition
from consolidator.rules.policy import FlushReason, Policy
from consolidator.rules.shape import (
    INT64_MAX,
    REFERENCE_SHAPE,
    EventView,
    Shape,
    aggregate,
    payload_of,
    within_bounds,
)
from consolidator.rules.shape_bounds import bounds_safe
from consolidator.rules.tracecontext import TRACEPARENT_CHARS, TraceContext, batch_traceparent

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


def _field(text: str) -> str:
    """``text`` as a length-prefixed field, ``<bytes>:<text>``, the length that of its UTF-8 bytes."""
    return f"{len(text.encode())}:{text}"


def batch_id(group_key: str, positions: Iterable[SourcePosition], epochs: Mapping[str, int] = NO_EPOCHS,
             kind: str = "batch") -> str:
    """128-bit hex id (v2) from the kind of record, the group key and the sorted member positions,
    each position with its topic's epoch (``epochs``, 0 when absent; ``consolidator offsets
    reset`` moves a topic's epoch). Every field is length-prefixed (``<bytes>:<UTF-8>``), so no
    two different inputs give the same text, whatever characters a group key holds.

    The hashed text is ``consolidator-batch-v2``, the kind and the group key, then per position
    its topic, epoch, partition and offset fields. Sorted positions of one partition come
    together, so that partition's first three fields are formatted once for all of them (the
    claim computes this id for every flushed row)."""
    parts = ["consolidator-batch-v2", _field(kind), _field(group_key)]
    append = parts.append
    head, topic_of_head, partition_of_head = "", None, None
    for topic, partition, offset in sorted(positions):
        if partition != partition_of_head or topic != topic_of_head:
            head = _field(topic) + _field(str(epochs.get(topic, 0))) + _field(str(partition))
            topic_of_head, partition_of_head = topic, partition
        digits = str(offset)
        append(f"{head}{len(digits)}:{digits}")
    return hashlib.sha256("".join(parts).encode()).hexdigest()[:32]


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


@dataclass(frozen=True, slots=True)
class MessageOptions:
    """What, besides its members, decides a message's size: the event shape (the reference: version 1),
    completion tracking (item ids and the ack token) and a rate limit (``held_back_ms``). The
    byte cap is applied to the message with every optional field these allow, at its widest,
    counted as the sink counts a body (``measure``: the policy's ``measure_body``; the encoded
    bytes as they are, or as the sink writes them)."""

    shape: Shape = REFERENCE_SHAPE
    tracked: bool = False
    rate_limited: bool = False
    measure: Callable[[bytes], int] = len

    @classmethod
    def of(cls, policy: Policy, tracked: bool = False, rate_limited: bool = False, *,
           shape: Shape = REFERENCE_SHAPE) -> MessageOptions:
        """The options of ``policy``'s messages of event shape ``shape`` (the field names'):
        how its sink counts a body."""
        return cls(shape, tracked, rate_limited, policy.measure_body)


PLAIN = MessageOptions()
_SIZING_KEY = b"\x00" * 16  # any key: an ack token is always 32 hex digits
_SIZING_TRACE = (TraceContext("00-" + "1" * 32 + "-" + "1" * 16 + "-01"),)  # a traceparent: always 55 characters


def _pairs(items: tuple[tuple[str, int], ...] | EventView) -> tuple[tuple[str, int], ...]:
    """The (sku, quantity) pairs of a row; none for a row a generic shape stored."""
    return () if isinstance(items, EventView) else items


def _view(items: tuple[tuple[str, int], ...] | EventView) -> EventView:
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
    newest = _newest_per_item(members)
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
            for sku, quantity in _pairs(member.items):
                quantities[sku] = quantities.get(sku, 0) + quantity
        message["schema_version"] = SCHEMA_VERSION
        message["items"] = [{"sku": sku, "quantity": quantities[sku]} for sku in sorted(quantities)]
        message["members"] = ([{**m.position.as_dict(), "item_id": m.item_id} for m in by_position]
                              if ack_key is not None else [m.position.as_dict() for m in by_position])
        if ack_key is not None or held_back_ms > 0:
            message["schema_minor"] = SCHEMA_MINOR_TRACKED if ack_key is not None else SCHEMA_MINOR_HELD_BACK
    else:
        events = [_view(m.items).event for m in sorted(newest.values(), key=_position_of)]
        message["schema_version"] = SCHEMA_VERSION_SHAPED
        message["aggregates"] = aggregate(shape, events)
        message["members"] = [{**m.position.as_dict(), "item_id": m.item_id}
                              | ({"event": payload_of(_view(m.items), shape)} if shape.carries_payload else {})
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


def _newest_per_item(members: Sequence[Member]) -> dict[str, Member]:
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


def message_bytes(group_key: str, members: Sequence[Member], reason: FlushReason, flushed_at_ms: int,
                  options: MessageOptions = PLAIN) -> int:
    """Size of the encoded message of these members with every field ``options`` allow, at its
    widest, as the sink counts it (``options.measure``): the published message is never larger
    (the ack token and the ``traceparent`` have fixed lengths, the held-back time is counted with
    the most digits it can have). The ``traceparent`` is always counted: whether members have
    trace contexts is known only at publish, and every engine splits a claim alike."""
    return options.measure(encode(build_message(
        group_key, members, reason, flushed_at_ms, shape=options.shape,
        ack_key=_SIZING_KEY if options.tracked else None, held_back_ms=INT64_MAX if options.rate_limited else 0,
        trace_contexts=_SIZING_TRACE)))


def message_bytes_bound(group_key: str, members: Sequence[Member], options: MessageOptions = PLAIN) -> int:
    """An upper bound of :func:`message_bytes`, without building the message: every string
    counted as if each character were a 6-byte JSON escape (the most any sink writes for one:
    the SQS sink's escapes are 6 bytes too), every number at its widest. A generic shape has
    no cheap bound (its members carry events): the bound is then infinite."""
    if not options.shape.is_reference:
        return 1 << 62
    size = 512 + 6 * len(group_key) + 64 + TRACEPARENT_CHARS  # fixed fields, keys, ids, times, counts, trace
    size += 160 if options.tracked or options.rate_limited else 0  # ack token, flags, held-back time
    for m in members:
        size += (12 if options.tracked else 6) * len(m.item_id) + 3 + 6 * len(m.position.topic) + 96
        size += sum(6 * len(sku) + 64 for sku, _ in _pairs(m.items))
    return size


def fit_count(fits: Callable[[int], bool], have: Callable[[int], int]) -> int:
    """How many members the next batch takes, given ``fits(m)`` (a message of the first ``m``
    members is within the cap) and ``have(m)`` (how many of the first ``m`` members exist:
    ``min(m, n)``; a reader may fetch them when asked). At least 1 when ``have(1)`` is 1.

    Prefixes of 1, 2, 4, ... members are tried until one does not fit or no more members
    exist, then the boundary is found by bisection between the last prefix that fitted and the
    first that did not. The answer depends on the first ``2k`` members only (``k`` the answer),
    never on how many come after: a reader that reads pages on demand gets the same batches as
    a caller holding the whole claim, and reads at most twice the members the batch takes."""
    if have(1) < 1:
        return 0
    fits_up_to, probe = 1, 2
    while True:
        available = have(probe)
        if available <= fits_up_to:
            return fits_up_to  # every member there is fits
        if not fits(available):
            too_big = available
            break
        fits_up_to = available
        if available < probe:
            return fits_up_to
        probe *= 2
    while too_big - fits_up_to > 1:  # invariant: fits_up_to fits, too_big does not
        middle = (fits_up_to + too_big) // 2
        if fits(middle):
            fits_up_to = middle
        else:
            too_big = middle
    return fits_up_to


def prefix_fits(group_key: str, members: Sequence[Member], reason: FlushReason, flushed_at_ms: int,
                max_bytes: int, options: MessageOptions = PLAIN) -> Callable[[int], bool]:
    """``fits(m)`` for :func:`fit_count`: the message of ``members[:m]`` is at most ``max_bytes``
    (decided by :func:`message_bytes_bound` when that suffices, without building the message)."""
    def fits(m: int) -> bool:
        prefix = members[:m]
        return (message_bytes_bound(group_key, prefix, options) <= max_bytes
                or message_bytes(group_key, prefix, reason, flushed_at_ms, options) <= max_bytes)
    return fits


def bounded_prefix(members: Sequence[Member], shape: Shape = REFERENCE_SHAPE) -> int:
    """How many of ``members`` (claim order) the next batch takes before a quantity it sums
    would pass ``MAX_QUANTITY`` (2**63-1): members are taken one by one, as
    :func:`build_message` counts them (the newest row of each item), and the first that would
    take a sku's sum over the bound starts the next batch. At least 1: ingest refuses an event
    whose own sums go over, so a member alone always fits. Cheap when the quantities of all
    members together fit (always, unless quantities reach 10**18 or so). A generic ``shape``:
    the longest prefix (:func:`fit_count`) whose outputs all stay within bounds
    (:func:`~consolidator.rules.shape.within_bounds`: integers within int64, doubles finite)."""
    if not shape.is_reference:
        if bounds_safe(shape, [_view(x.items).event for x in members]):
            return len(members)  # every prefix fits (shape_bounds): what probing gives, without it
        return fit_count(lambda m: within_bounds(aggregate(shape, [
            _view(x.items).event for x in sorted(_newest_per_item(members[:m]).values(), key=lambda x: x.position)])),
            lambda m: min(m, len(members)))
    if sum([quantity for m in members for _, quantity in _pairs(m.items)]) <= MAX_QUANTITY:
        return len(members)
    newest: dict[str, Member] = {}
    sums: dict[str, int] = {}
    for index, member in enumerate(members):
        current = newest.get(member.item_id)
        if current is not None and member.position < current.position:
            continue  # an older row of an item already taken: the sums do not change
        change: dict[str, int] = {}
        for sku, quantity in () if current is None else _pairs(current.items):
            change[sku] = change.get(sku, sums.get(sku, 0)) - quantity
        for sku, quantity in _pairs(member.items):
            change[sku] = change.get(sku, sums.get(sku, 0)) + quantity
        if any(total > MAX_QUANTITY for total in change.values()):
            return max(index, 1)
        sums.update(change)
        newest[member.item_id] = member
    return len(members)


def fitting_prefix(
    group_key: str, members: Sequence[Member], reason: FlushReason, flushed_at_ms: int, max_bytes: int | None,
    options: MessageOptions = PLAIN,
) -> int:
    """How many of ``members`` (claim order) the next batch takes: under the byte cap (``None``:
    no cap) :func:`fit_count` over them, at least 1 (a member too large on its own is a batch of
    its own; the sink rejects it and, after ``max_attempts``, it reaches the dead-letter
    destination), then of that prefix :func:`bounded_prefix` (its integer sums fit a signed
    64-bit integer, its double sums are finite), in this order, as the Lambda path's claim
    (``store/claims.py``): sums may leave int64 and come back (negative values), so the bounded
    prefix of the whole claim, cut by the byte cap afterwards, could sum past it. While a message grows with its prefix
    (always, except where a later member of an item replaces an earlier one with fewer SKUs)
    this is the longest prefix that fits."""
    taken = len(members) if max_bytes is None else fit_count(
        prefix_fits(group_key, members, reason, flushed_at_ms, max_bytes, options), lambda m: min(m, len(members)))
    return bounded_prefix(members[:taken], options.shape) if taken else 0


def split_to_fit(
    group_key: str, members: Sequence[Member], reason: FlushReason, flushed_at_ms: int, max_bytes: int | None,
    options: MessageOptions = PLAIN,
) -> list[list[Member]]:
    """One claim's members as consecutive batches, each :func:`fitting_prefix` of what is left.
    Both engines split a claim with this rule, so they produce the same batches."""
    rest = list(members)
    batches = []
    while rest:
        taken = fitting_prefix(group_key, rest, reason, flushed_at_ms, max_bytes, options)
        batches.append(rest[:taken])
        rest = rest[taken:]
    return batches


def fit_claims(
    group_key: str, claims: Sequence[tuple[FlushReason, Sequence[Member]]], flushed_at_ms: int, policy: Policy,
    tracked: bool = False, *, shape: Shape = REFERENCE_SHAPE,
) -> list[tuple[FlushReason, list[Member]]]:
    """:func:`~consolidator.rules.policy.plan_batches` claims split under ``policy.max_batch_bytes`` and
    so that their sums stay within bounds (:func:`fitting_prefix`), the size counted as
    ``policy.measure_body`` counts a body, with the event shape ``shape``, ``held_back_ms`` when the
    group has a rate limit, and the tracking fields."""
    options = MessageOptions.of(policy, tracked, policy.limit_for(group_key) is not None, shape=shape)
    return [(reason, batch) for reason, members in claims
            for batch in split_to_fit(group_key, members, reason, flushed_at_ms, policy.max_batch_bytes, options)]


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
