"""The dead-letter entries (poison, expired, dead batch) and the bounds that make each one fit.

Guarantees:
- every entry carries ``kind``, ``reason`` and an ``idempotency_key``: the source position of
  a poison record (``poison:<topic>:<partition>:<offset>``, or the hash of the piece when it has
  no readable position), the position of an expired row (``expired:...``), the batch id of a
  dead batch (``dead_batch:<id>``). A retried write repeats the key; readers count it once;
- every field a producer or a sink controls is bounded when the entry is built, and each cut
  says so: ``<field>_truncated`` true, with the full size next to it (``detail_chars``,
  ``key_bytes``, ``value_bytes``, ``item_count``...);
- :func:`encode_entry` turns any entry into JSON of at most the destination's size (ASCII: a
  character is a byte), shortening the largest parts first, each with its flag. The fields
  that identify an entry (kind, reason, key, position, group, item, batch id) are never cut.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence

from consolidator.rules.batch import Member, iso_ms
from consolidator.rules.events import KafkaRecord, PoisonEvent, Rejected
from consolidator.rules.shape import EventView

MAX_RAW_BYTES = 150_000  # the raw value kept (base64: 200,000 characters)
MAX_KEY_BYTES = 8_192  # the Kafka key kept (base64: 10,924 characters)
MAX_TEXT_CHARS = 2_048  # a reason's detail, an error, an MSK partition key
MAX_ENVELOPE_CHARS = MAX_RAW_BYTES // 2  # the JSON of an MSK piece that is not a usable record
MAX_ITEMS_CHARS = 150_000  # the JSON of an expired row's items


def idempotency_key(entry: dict) -> str:
    """What makes two dead-letter entries the same (see the module docstring). Entries written
    before the key existed get the key their kind has, computed from their content."""
    if entry.get("idempotency_key"):
        return str(entry["idempotency_key"])
    source = entry.get("source")
    if isinstance(source, dict):
        kind = "expired" if entry.get("kind") == "expired" else "poison"
        return f"{kind}:{source.get('topic')}:{source.get('partition')}:{source.get('offset')}"
    batch = entry.get("batch")
    if isinstance(batch, dict) and batch.get("batch_id"):
        return f"dead_batch:{batch['batch_id']}"
    return json.dumps(entry, sort_keys=True)


def _text(entry: dict, name: str, text: str | None, limit: int = MAX_TEXT_CHARS) -> dict:
    """``entry`` with field ``name`` = ``text`` cut to ``limit`` characters (flag and length when cut)."""
    if text is None or len(text) <= limit:
        return entry | {name: text}
    return entry | {name: text[:limit], f"{name}_truncated": True, f"{name}_chars": len(text)}


def _raw(entry: dict, name: str, data: bytes | None, limit: int) -> dict:
    """``entry`` with ``<name>_b64`` = base64 of at most ``limit`` bytes of ``data``, its size and flag."""
    if data is None:
        return entry | {f"{name}_b64": None}
    return entry | {f"{name}_b64": base64.b64encode(data[:limit]).decode(), f"{name}_bytes": len(data),
                    f"{name}_truncated": len(data) > limit}


def poison_entry(record: KafkaRecord, error: PoisonEvent, now_ms: int) -> dict:
    """The dead-letter message of a poison record: position, raw key and value (base64, bounded),
    reason and detail (bounded), and the position again as ``idempotency_key``."""
    p = record.position
    entry = {
        "kind": "poison",
        "idempotency_key": f"poison:{p.topic}:{p.partition}:{p.offset}",
        "reason": str(error.reason),
        "source": p.as_dict(),
        "timestamp_ms": record.timestamp_ms,
        "dead_lettered_at": iso_ms(now_ms),
    }
    entry = _text(entry, "detail", error.detail)
    if error.schema_id is not None:  # a value in a registry format (consolidator.sources.formats)
        entry["schema_id"] = error.schema_id
    entry = _raw(entry, "key", record.key, MAX_KEY_BYTES)
    if record.key is None:  # unchanged shape for a record without a key
        entry = {k: v for k, v in entry.items() if k not in ("key_bytes", "key_truncated")}
    return _raw(entry, "value", record.value or b"", MAX_RAW_BYTES)


def _b64_text(entry: dict, name: str, text: str | None, limit_bytes: int) -> dict:
    """A base64 text from an MSK envelope, cut to encode at most ``limit_bytes`` (flag when cut)."""
    chars = 4 * (limit_bytes // 3)
    if text is None or len(text) <= chars:
        return entry | {f"{name}_b64": text}
    return entry | {f"{name}_b64": text[:chars], f"{name}_truncated": True, f"{name}_b64_chars": len(text)}


def rejected_entry(rejected: Rejected, now_ms: int) -> dict:
    """The dead-letter message of a piece of an MSK event that is not a usable record: its
    position when readable (``source`` is null otherwise, and the key is the hash of the piece),
    the piece as received (JSON, bounded), and the reason."""
    raw = json.dumps(rejected.raw, default=repr)  # ASCII; at most doubles when nested
    p = rejected.position
    key = (f"poison:{p.topic}:{p.partition}:{p.offset}" if p is not None
           else f"poison:unidentifiable:{hashlib.sha256(raw.encode()).hexdigest()}")
    entry = {
        "kind": "poison",
        "idempotency_key": key,
        "reason": str(rejected.reason),
        "source": None if p is None else p.as_dict(),
        "timestamp_ms": rejected.timestamp_ms,
        "envelope_json": raw[:MAX_ENVELOPE_CHARS],
        "envelope_truncated": len(raw) > MAX_ENVELOPE_CHARS,
        "dead_lettered_at": iso_ms(now_ms),
    }
    entry = _text(_text(entry, "detail", rejected.detail), "partition_key", rejected.partition_key)
    entry = _b64_text(entry, "key", rejected.key_b64, MAX_KEY_BYTES)
    return _b64_text(entry, "value", rejected.value_b64, MAX_RAW_BYTES)


def dead_batch_entry(message: dict, attempts: int, error: str, now_ms: int) -> dict:
    """The dead-letter message of a batch that failed ``attempts`` publishes (the sink's error
    bounded; a message too large for the destination is shortened by :func:`encode_entry`)."""
    entry = {
        "kind": "dead_batch",
        "idempotency_key": f"dead_batch:{message['batch_id']}",
        "reason": "max_attempts",
        "attempts": attempts,
        "batch": message,
        "dead_lettered_at": iso_ms(now_ms),
    }
    return _text(entry, "detail", error)


def unbuilt_batch_entry(batch_id: str, group_key: str, members: Sequence[Member] | None, attempts: int, error: str,
                        now_ms: int) -> dict:
    """The dead-letter message of a batch whose message could not be built ``attempts`` times (an
    unexpected error, ``error``): a dead batch like :func:`dead_batch_entry`, whose ``batch``
    holds what is known without the message (``message_built`` false): its id, group and, when
    its rows could be read, its members' positions and item ids, in batch order."""
    batch: dict = {"batch_id": batch_id, "group_key": group_key, "message_built": False}
    if members is not None:
        batch["members"] = [{**m.position.as_dict(), "item_id": m.item_id} for m in members]
    entry = {
        "kind": "dead_batch",
        "idempotency_key": f"dead_batch:{batch_id}",
        "reason": "max_attempts",
        "attempts": attempts,
        "batch": batch,
        "dead_lettered_at": iso_ms(now_ms),
    }
    return _text(entry, "detail", error)


def expired_entry(group_key: str, member: Member, expired_at_ms: int, now_ms: int) -> dict:
    """The dead-letter message of a buffered row over the event TTL: its position (also as
    ``idempotency_key``), group, item, items (bounded; under a generic event shape, what the row
    keeps of the newest event as ``event``, dropped with ``event_truncated`` when over the bound)
    and age (expiry time minus the newest event's record timestamp)."""
    p = member.position
    entry = {
        "kind": "expired",
        "idempotency_key": f"expired:{p.topic}:{p.partition}:{p.offset}",
        "reason": "expired",
        "source": p.as_dict(),
        "group_key": group_key,
        "item_id": member.item_id,
        "merged_events": member.merged_events,
        "record_ts_ms": member.record_ts_ms,
        "age_ms": None if member.record_ts_ms is None else expired_at_ms - member.record_ts_ms,
        "expired_at": iso_ms(expired_at_ms),
        "dead_lettered_at": iso_ms(now_ms),
    }
    if isinstance(member.items, EventView):
        kept = member.items.event
        if len(json.dumps(kept)) > MAX_ITEMS_CHARS:
            return entry | {"event": None, "event_truncated": True}
        return entry | {"event": kept}
    return entry | _items(member.items, MAX_ITEMS_CHARS)


def _items(items: tuple[tuple[str, int], ...], limit: int) -> dict:
    """``items`` as ``[{sku, quantity}]``, the longest prefix whose JSON fits ``limit`` characters."""
    listed = [{"sku": sku, "quantity": quantity} for sku, quantity in items]
    size, kept = 2, 0
    for item in listed:
        size += len(json.dumps(item, sort_keys=True)) + 2
        if size > limit:
            break
        kept += 1
    if kept == len(listed):
        return {"items": listed}
    return {"items": listed[:kept], "items_truncated": True, "item_count": len(listed)}


# What encode_entry empties, largest first, and the flag that says so. Never an identifying field.
_SHRINK = {"value_b64": "value_truncated", "envelope_json": "envelope_truncated", "items": "items_truncated",
           "key_b64": "key_truncated", "detail": "detail_truncated", "partition_key": "partition_key_truncated"}


def encode_entry(entry: dict, max_bytes: int) -> str:
    """The entry as JSON (sorted keys, ASCII) of at most ``max_bytes``. An entry over the size
    loses its largest parts until it fits, each flagged: a dead batch first its item ids and
    items (or aggregates), then its member list (its rows stay in the buffer, DEAD, and ``dlq redrive --batches``
    re-publishes them in full); then raw values, envelopes, items, keys and texts, emptied."""
    body = json.dumps(entry, sort_keys=True)
    if len(body) <= max_bytes:
        return body
    if isinstance(entry.get("batch"), dict):
        batch = {k: v for k, v in entry["batch"].items() if k not in ("item_ids", "items", "aggregates")}
        entry = entry | {"batch": batch, "batch_truncated": True}
        body = json.dumps(entry, sort_keys=True)
        if len(body) <= max_bytes:
            return body
        entry = entry | {"batch": {k: v for k, v in batch.items() if k != "members"}}
        body = json.dumps(entry, sort_keys=True)
    for name, flag in _SHRINK.items():
        if len(body) <= max_bytes:
            break
        if entry.get(name):
            emptied = ({"items": [], "item_count": entry.get("item_count", len(entry["items"]))}
                       if name == "items" else {name: ""})
            entry = entry | emptied | {flag: True}
            body = json.dumps(entry, sort_keys=True)
    if len(body) > max_bytes:
        raise ValueError(f"dead-letter entry {idempotency_key(entry)!r} is {len(body)} bytes without its"
                         f" bounded parts, over the destination's {max_bytes}")
    return body
