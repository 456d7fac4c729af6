"""Batch completion tracking: the ack message and the completion message.

Downstream code acknowledges the members of a consolidated batch with
:class:`consolidator.consumer.acks.AckClient`
(one SQS message per ack, no database access). The acks function applies them
(``services/acks.py``); when the last member of a sealed batch is acknowledged, one
completion message (JSON Schema ``schemas/completion-v1.schema.json``) goes to the
completion sink.

Guarantees a consumer can rely on:

- member ``i`` is the ``i``-th entry of the batch message's ``members`` list; an ack names
  members by index or by item id (an item id acknowledges every member carrying it);
- an ack carries the batch message's ``ack_token``: only who received the batch can
  acknowledge it (the acks function refuses any other ack, once, without retrying it);
- acknowledging a member twice changes nothing (a bit per member, not a counter);
- exactly one completion message per batch in normal operation, also when several ackers
  acknowledge the last members at once; across crashes at least once, always with the same
  ``completion_id`` and the same bytes, so consumers dedupe on it.

This module is pure (no SQL, no AWS at import time): importable by downstream code.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources

import orjson

from consolidator.rules.batch import iso_ms
from consolidator.rules.printable import echoed

COMPLETION_SCHEMA_VERSION = 1
ACK_VERSION = 1
MAX_MEMBERS_PER_ACK = 10_000


class AckFormatError(ValueError):
    """An ack message is not a valid ack; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class Ack:
    """Acknowledge members of one batch by index (``members``) and/or by ``item_ids``;
    ``token`` is the batch message's ``ack_token`` (required on the acks queue; operators with
    database access acknowledge without it: ``consolidator batch ack``)."""

    batch_id: str
    members: tuple[int, ...] = ()
    item_ids: tuple[str, ...] = ()
    token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.batch_id, str) and len(self.batch_id) == 32
                and all(c in "0123456789abcdef" for c in self.batch_id)):
            raise AckFormatError(f"batch_id must be 32 lowercase hex characters, got {echoed(self.batch_id)}")
        if not self.members and not self.item_ids:
            raise AckFormatError("an ack names at least one member (members or item_ids)")
        if len(self.members) + len(self.item_ids) > MAX_MEMBERS_PER_ACK:
            raise AckFormatError(f"an ack names at most {MAX_MEMBERS_PER_ACK} members")
        for index in self.members:
            if type(index) is not int or index < 0:
                raise AckFormatError(f"members are indexes >= 0, got {echoed(index)}")
        for item in self.item_ids:
            if not isinstance(item, str) or not item:
                raise AckFormatError(f"item_ids are non-empty strings, got {echoed(item)}")
        if self.token is not None and not isinstance(self.token, str):
            raise AckFormatError(f"ack_token must be a string, got {type(self.token).__name__}")

    def as_dict(self) -> dict:
        body: dict = {"ack_version": ACK_VERSION, "batch_id": self.batch_id}
        if self.token is not None:
            body["ack_token"] = self.token
        if self.members:
            body["members"] = list(self.members)
        if self.item_ids:
            body["item_ids"] = list(self.item_ids)
        return body

    def encode(self) -> bytes:
        return orjson.dumps(self.as_dict())


def parse_ack(body: str | bytes) -> Ack:
    """The ack in an SQS message body, or :class:`AckFormatError` naming the problem."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise AckFormatError(f"ack is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise AckFormatError(f"ack must be a JSON object, got {type(data).__name__}")
    if data.get("ack_version", ACK_VERSION) != ACK_VERSION:
        raise AckFormatError(f"unsupported ack_version {echoed(data.get('ack_version'))}")
    unknown = set(data) - {"ack_version", "batch_id", "ack_token", "members", "item_ids"}
    if unknown:
        raise AckFormatError(f"unknown ack fields: {', '.join(map(echoed, sorted(unknown)[:10]))}")
    members, item_ids = data.get("members", []), data.get("item_ids", [])
    if not isinstance(members, list) or not isinstance(item_ids, list):
        raise AckFormatError("members and item_ids must be lists")
    return Ack(data.get("batch_id"), tuple(members), tuple(item_ids), data.get("ack_token"))


def completion_id(batch_id: str) -> str:
    """The completion message's id: a function of the batch id only, the same on every retry."""
    return hashlib.sha256(f"consolidator-completion-v1\n{batch_id}".encode()).hexdigest()[:32]


def build_completion(
    batch_id: str, group_key: str, member_count: int, sealed_at_ms: int, completed_at_ms: int
) -> dict:
    """The completion-v1 message (every field is stored, so a re-publish has the same bytes)."""
    return {
        "schema_version": COMPLETION_SCHEMA_VERSION,
        "completion_id": completion_id(batch_id),
        "batch_id": batch_id,
        "group_key": group_key,
        "member_count": member_count,
        "sealed_at": iso_ms(sealed_at_ms),
        "completed_at": iso_ms(completed_at_ms),
    }


def load_completion_schema() -> dict:
    return json.loads(
        resources.files("consolidator.schemas").joinpath("completion-v1.schema.json").read_text()
    )


# -- the bitmap: bit i of the tracker = member i acknowledged -----------------------------------

def empty_bitmap(member_count: int) -> bytes:
    return bytes((member_count + 7) // 8)


def set_bits(bitmap: bytes, indexes: Iterable[int]) -> tuple[bytes, int]:
    """``bitmap`` with ``indexes`` set, and how many of them were not set before."""
    bits = bytearray(bitmap)
    newly = 0
    for index in indexes:
        byte, mask = index >> 3, 1 << (index & 7)
        if not bits[byte] & mask:
            bits[byte] |= mask
            newly += 1
    return bytes(bits), newly


def bit_count(bitmap: bytes) -> int:
    return int.from_bytes(bitmap, "little").bit_count()


def acked_indexes(bitmap: bytes, member_count: int) -> list[int]:
    return [i for i in range(member_count) if bitmap[i >> 3] & (1 << (i & 7))]
