"""Batch message version 1: aggregation and the deterministic ``batch_id``.

``batch_id`` is a function of the group key and the members' source positions only, so
every engine, every retry and every replay of the same claim yields the same id.
The JSON Schema is ``schemas/batch-v1.schema.json`` (``batch-v1.1.schema.json`` adds the optional
``held_back_ms`` of a rate-limited group).

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
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import NamedTuple

import orjson

from consolidator.events import SourcePosition
from consolidator.policy import FlushReason, Policy

SCHEMA_VERSION = 1
SCHEMA_MINOR_HELD_BACK = 1  # v1.1: optional ``held_back_ms`` (schemas/batch-v1.1.schema.json)


class Member(NamedTuple):
    """One buffered row of a batch: the newest event for an item, and how many events it holds."""

    position: SourcePosition
    item_id: str
    items: tuple[tuple[str, int], ...]
    first_seen_ms: int
    last_update_ms: int
    merged_events: int = 1
    record_ts_ms: int | None = None  # record timestamp of the newest event (for the TTL)

    def order_key(self) -> tuple:
        """(first_seen, position): positions compare like their stored ``pos_key`` bytes."""
        return (self.first_seen_ms, self.position)


def batch_id(group_key: str, positions: Iterable[SourcePosition]) -> str:
    """128-bit hex id from the group key and the sorted member positions."""
    lines = "".join(f"{p.topic}\t{p.partition}\t{p.offset}\n" for p in sorted(positions))
    return hashlib.sha256(f"consolidator-batch-v1\n{group_key}\n{lines}".encode()).hexdigest()[:32]


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


def build_message(
    group_key: str, members: Sequence[Member], reason: FlushReason, flushed_at_ms: int,
    *, ack_key: bytes | None = None, held_back_ms: int = 0,
) -> dict:
    """The v1 message. Rows of the same item (one per monthly bucket) coalesce: the newest
    position's items count; quantities are summed per sku across items. ``ack_key`` (completion
    tracking on): the batch is sealed for completion tracking; the message says so, carries its
    ``ack_token`` (:func:`ack_token`), and each ``members`` entry carries its item id (member i =
    i-th entry, what acks name by index). A group held back by
    its rate limit adds ``held_back_ms`` and ``schema_minor: 1`` (v1.1); every other message is
    exactly v1, so consumers of v1 see no change while no rate limit holds a group back."""
    if not members:
        raise ValueError("a batch needs at least one member")
    newest_per_item: dict[str, Member] = {}
    for member in members:
        current = newest_per_item.get(member.item_id)
        if current is None or member.position > current.position:
            newest_per_item[member.item_id] = member
    quantities: dict[str, int] = {}
    for member in newest_per_item.values():
        for sku, quantity in member.items:
            quantities[sku] = quantities.get(sku, 0) + quantity
    positions = sorted(m.position for m in members)
    message = {
        "schema_version": SCHEMA_VERSION,
        "batch_id": batch_id(group_key, positions),
        "group_key": group_key,
        "flush_reason": str(reason),
        "item_ids": sorted(newest_per_item),
        "items": [{"sku": sku, "quantity": quantities[sku]} for sku in sorted(quantities)],
        "item_count": len(newest_per_item),
        "event_count": sum(m.merged_events for m in members),
        "first_event_at": iso_ms(min(m.first_seen_ms for m in members)),
        "last_event_at": iso_ms(max(m.last_update_ms for m in members)),
        "flushed_at": iso_ms(flushed_at_ms),
        "members": [p.as_dict() for p in positions],
    }
    if held_back_ms > 0:
        message |= {"schema_minor": SCHEMA_MINOR_HELD_BACK, "held_back_ms": held_back_ms}
    if ack_key is not None:
        item_of = {m.position: m.item_id for m in members}
        message["completion_tracking"] = True
        message["ack_token"] = ack_token(ack_key, message["batch_id"])
        message["members"] = [{**p.as_dict(), "item_id": item_of[p]} for p in positions]
    return message


def encode(message: dict) -> bytes:
    """Canonical JSON bytes (sorted keys, no spaces, UTF-8): equal messages give equal bytes."""
    try:
        return orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer beyond 64 bits (a huge summed quantity): same bytes, slower
        return json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def message_bytes(group_key: str, members: Sequence[Member], reason: FlushReason, flushed_at_ms: int) -> int:
    """Size of the encoded v1 message of these members."""
    return len(encode(build_message(group_key, members, reason, flushed_at_ms)))


def message_bytes_bound(group_key: str, members: Sequence[Member]) -> int:
    """An upper bound of :func:`message_bytes`, without building the message: every string
    counted as if each character were a 6-byte JSON escape, every number at its widest."""
    size = 512 + 6 * len(group_key)  # fixed fields, keys, batch id, times, counts
    for m in members:
        size += 6 * len(m.item_id) + 3 + 6 * len(m.position.topic) + 80
        size += sum(6 * len(sku) + 64 for sku, _ in m.items)
    return size


def fitting_prefix(
    group_key: str, members: Sequence[Member], reason: FlushReason, flushed_at_ms: int, max_bytes: int
) -> int:
    """How many of ``members`` (claim order) the next batch takes under the byte cap: the
    longest prefix found whose encoded message is at most ``max_bytes``, at least 1 (a member
    too large on its own is a batch of its own; the sink rejects it and, after
    ``max_attempts``, it reaches the dead-letter destination)."""
    if message_bytes_bound(group_key, members) <= max_bytes:
        return len(members)  # the common case: far under the cap, no message built
    if message_bytes(group_key, members, reason, flushed_at_ms) <= max_bytes:
        return len(members)
    fits, too_big = 1, len(members)  # invariant: a prefix of ``too_big`` members is too large
    while too_big - fits > 1:
        middle = (fits + too_big) // 2
        if message_bytes(group_key, members[:middle], reason, flushed_at_ms) <= max_bytes:
            fits = middle
        else:
            too_big = middle
    return fits


def split_to_fit(
    group_key: str, members: Sequence[Member], reason: FlushReason, flushed_at_ms: int, max_bytes: int | None
) -> list[list[Member]]:
    """One claim's members as consecutive batches, each :func:`fitting_prefix` of what is left.
    Both engines split a claim with this rule, so they produce the same batches."""
    rest = list(members)
    if max_bytes is None:
        return [rest] if rest else []
    batches = []
    while rest:
        taken = fitting_prefix(group_key, rest, reason, flushed_at_ms, max_bytes)
        batches.append(rest[:taken])
        rest = rest[taken:]
    return batches


def fit_claims(
    group_key: str, claims: Sequence[tuple[FlushReason, Sequence[Member]]], flushed_at_ms: int, policy: Policy
) -> list[tuple[FlushReason, list[Member]]]:
    """:func:`~consolidator.policy.plan_batches` claims split under ``policy.max_batch_bytes``."""
    return [(reason, batch) for reason, members in claims
            for batch in split_to_fit(group_key, members, reason, flushed_at_ms, policy.max_batch_bytes)]


def load_schema(version: str = "1") -> dict:
    """The JSON Schema of the message: ``"1"`` or ``"1.1"`` (v1 plus the optional held-back field)."""
    return json.loads(resources.files("consolidator.schemas").joinpath(f"batch-v{version}.schema.json").read_text())
