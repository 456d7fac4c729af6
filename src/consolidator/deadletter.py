"""Where poison events and dead batches go: SQS (default in AWS) or a JSON-lines file (local).

A write counts only when the destination confirmed it; ``send`` returns the indexes of the
entries that were not confirmed, so the caller can report them for retry instead of losing them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from consolidator import jsonlines
from consolidator.batch import Member, iso_ms
from consolidator.events import KafkaRecord, PoisonEvent
from consolidator.msk import Rejected
from consolidator.redact import masked

MAX_RAW_BYTES = 150_000  # keeps a dead-letter message under the SQS size limit once base64'd
SQS_MAX_BYTES = 256 * 1024  # one SQS message, and one SendMessageBatch call, at most


def idempotency_key(entry: dict) -> str:
    """What makes two dead-letter entries the same: the source position of a poison record,
    the batch id of a dead batch. A retried partition that dead-letters its poison again writes
    an entry with the same key; readers count it once. Entries written before the key existed
    get the same key computed from their content."""
    if entry.get("idempotency_key"):
        return str(entry["idempotency_key"])
    source = entry.get("source")
    if isinstance(source, dict):
        return f"poison:{source.get('topic')}:{source.get('partition')}:{source.get('offset')}"
    batch = entry.get("batch")
    if isinstance(batch, dict) and batch.get("batch_id"):
        return f"dead_batch:{batch['batch_id']}"
    return json.dumps(entry, sort_keys=True)


def poison_entry(record: KafkaRecord, error: PoisonEvent, now_ms: int) -> dict:
    """The dead-letter message of a poison record: position, raw bytes (base64), reason, and
    the position again as ``idempotency_key``."""
    value = record.value or b""
    p = record.position
    return {
        "kind": "poison",
        "idempotency_key": f"poison:{p.topic}:{p.partition}:{p.offset}",
        "reason": str(error.reason),
        "detail": error.detail,
        "source": record.position.as_dict(),
        "timestamp_ms": record.timestamp_ms,
        "key_b64": None if record.key is None else base64.b64encode(record.key).decode(),
        "value_b64": base64.b64encode(value[:MAX_RAW_BYTES]).decode(),
        "value_bytes": len(value),
        "value_truncated": len(value) > MAX_RAW_BYTES,
        "dead_lettered_at": iso_ms(now_ms),
    }


def rejected_entry(rejected: Rejected, now_ms: int) -> dict:
    """The dead-letter message of a piece of an MSK event that is not a usable record: its
    position when readable (``source`` is null otherwise), the piece as received (JSON,
    truncated like a poison value), and the reason."""
    raw = json.dumps(rejected.raw, default=repr)  # ASCII; at most doubles when nested
    return {
        "kind": "poison",
        "reason": str(rejected.reason),
        "detail": rejected.detail,
        "source": None if rejected.position is None else rejected.position.as_dict(),
        "partition_key": rejected.partition_key,
        "timestamp_ms": rejected.timestamp_ms,
        "key_b64": rejected.key_b64,
        "value_b64": rejected.value_b64,
        "envelope_json": raw[:MAX_RAW_BYTES // 2],
        "envelope_truncated": len(raw) > MAX_RAW_BYTES // 2,
        "dead_lettered_at": iso_ms(now_ms),
    }


def dead_batch_entry(message: dict, attempts: int, error: str, now_ms: int) -> dict:
    """The dead-letter message of a batch that failed ``attempts`` publishes."""
    return {
        "kind": "dead_batch",
        "idempotency_key": f"dead_batch:{message['batch_id']}",
        "reason": "max_attempts",
        "detail": error,
        "attempts": attempts,
        "batch": message,
        "dead_lettered_at": iso_ms(now_ms),
    }


def expired_entry(group_key: str, member: Member, expired_at_ms: int, now_ms: int) -> dict:
    """The dead-letter message of a buffered row over the event TTL: its position, group, item,
    items and age (expiry time minus the newest event's record timestamp)."""
    return {
        "kind": "expired",
        "reason": "expired",
        "source": member.position.as_dict(),
        "group_key": group_key,
        "item_id": member.item_id,
        "items": [{"sku": sku, "quantity": quantity} for sku, quantity in member.items],
        "merged_events": member.merged_events,
        "record_ts_ms": member.record_ts_ms,
        "age_ms": None if member.record_ts_ms is None else expired_at_ms - member.record_ts_ms,
        "expired_at": iso_ms(expired_at_ms),
        "dead_lettered_at": iso_ms(now_ms),
    }


class DeadLetter(Protocol):
    def send(self, entries: Sequence[dict]) -> set[int]:
        """Write ``entries``; return the indexes that were NOT confirmed (empty set = all durable)."""
        ...


@dataclass
class FileDeadLetter:
    """Appends JSON lines and fsyncs before confirming. For local runs and the demo.
    Crash-atomic per line (:mod:`consolidator.jsonlines`): no reader sees a torn entry."""

    path: Path

    def send(self, entries: Sequence[dict]) -> set[int]:
        if not entries:
            return set()
        try:
            jsonlines.append(self.path, (json.dumps(entry, sort_keys=True).encode() for entry in entries))
        except OSError:
            return set(range(len(entries)))
        return set()

    def read(self) -> list[dict]:
        """Every complete entry (a torn tail is never an entry)."""
        return jsonlines.read(self.path)


def fit_entry(entry: dict, max_bytes: int) -> str:
    """The entry as JSON, at most ``max_bytes``: a dead batch too large keeps its id, group,
    counts and member positions but drops item ids and items (the rows stay in the buffer,
    DEAD, and ``dlq redrive --batches`` re-publishes them in full)."""
    body = json.dumps(entry, sort_keys=True)
    if len(body.encode()) <= max_bytes or entry.get("kind") != "dead_batch":
        return body
    batch = {k: v for k, v in entry["batch"].items() if k not in ("item_ids", "items")}
    body = json.dumps(entry | {"batch": batch, "batch_truncated": True}, sort_keys=True)
    if len(body.encode()) <= max_bytes:
        return body
    batch.pop("members", None)
    return json.dumps(entry | {"batch": batch, "batch_truncated": True}, sort_keys=True)


class SqsDeadLetter:
    """SQS queue; entries go in calls of at most 10 entries and 256 KiB, each entry's result
    is checked; a dead batch too large for one message is shortened (:func:`fit_entry`)."""

    def __init__(self, queue_url: str, client=None) -> None:
        import boto3

        self.queue_url = queue_url
        region = urlsplit(queue_url).hostname.split(".")[1] if queue_url.count(".") >= 3 else None
        self._client = client or boto3.client("sqs", region_name=region)

    def send(self, entries: Sequence[dict]) -> set[int]:
        from botocore.exceptions import BotoCoreError, ClientError

        from consolidator.sinks import chunk_by_size

        failed: set[int] = set()
        bodies = [fit_entry(entry, SQS_MAX_BYTES) for entry in entries]
        sizes = [len(body.encode()) for body in bodies]
        for chunk in chunk_by_size(range(len(entries)), sizes, 10, SQS_MAX_BYTES):
            try:
                response = self._client.send_message_batch(
                    QueueUrl=self.queue_url,
                    Entries=[{"Id": str(i), "MessageBody": bodies[i]} for i in chunk],
                )
            except (BotoCoreError, ClientError):
                failed.update(chunk)
                continue
            failed.update(int(f["Id"]) for f in response.get("Failed", []))
        return failed

    def receive(self, max_messages: int = 10) -> list[tuple[dict, str]]:
        """Up to ``max_messages`` entries with their receipt handles. They stay in the queue,
        invisible for its visibility timeout, until :meth:`delete`."""
        response = self._client.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=max_messages, WaitTimeSeconds=0
        )
        return [(json.loads(m["Body"]), m["ReceiptHandle"]) for m in response.get("Messages", [])]

    def read(self, max_messages: int = 10) -> list[dict]:
        return [entry for entry, _ in self.receive(max_messages)]

    def delete(self, receipt_handles: Sequence[str]) -> int:
        """Delete received messages; returns how many could not be deleted (they reappear)."""
        failed = 0
        for start in range(0, len(receipt_handles), 10):
            chunk = receipt_handles[start : start + 10]
            response = self._client.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": handle} for i, handle in enumerate(chunk)],
            )
            failed += len(response.get("Failed", []))
        return failed


def dead_letter_from_url(url: str) -> FileDeadLetter | SqsDeadLetter:
    """``sqs://sqs.<region>.amazonaws.com/<account>/<queue>`` or ``file:///path/dead-letter.jsonl``."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        return FileDeadLetter(Path((parts.netloc or "") + parts.path))
    if parts.scheme == "sqs":
        return SqsDeadLetter("https://" + url.removeprefix("sqs://"))
    raise ValueError(f"unsupported dead-letter URL {masked(url)!r}: use sqs:// or file://")
