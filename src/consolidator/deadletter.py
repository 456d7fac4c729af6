"""Where poison events and dead batches go: SQS (default in AWS) or a JSON-lines file (local).

A write counts only when the destination confirmed it; ``send`` returns the indexes of the
entries that were not confirmed, so the caller can report them for retry instead of losing them.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from consolidator.batch import Member, iso_ms
from consolidator.events import KafkaRecord, PoisonEvent

MAX_RAW_BYTES = 150_000  # keeps a dead-letter message under the SQS size limit once base64'd


def poison_entry(record: KafkaRecord, error: PoisonEvent, now_ms: int) -> dict:
    """The dead-letter message of a poison record: position, raw bytes (base64), reason."""
    value = record.value or b""
    return {
        "kind": "poison",
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


def dead_batch_entry(message: dict, attempts: int, error: str, now_ms: int) -> dict:
    """The dead-letter message of a batch that failed ``attempts`` publishes."""
    return {
        "kind": "dead_batch",
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
    """Appends JSON lines and fsyncs before confirming. For local runs and the demo."""

    path: Path

    def send(self, entries: Sequence[dict]) -> set[int]:
        if not entries:
            return set()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as out:
                for entry in entries:
                    out.write(json.dumps(entry, sort_keys=True) + "\n")
                out.flush()
                os.fsync(out.fileno())
        except OSError:
            return set(range(len(entries)))
        return set()

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line]


class SqsDeadLetter:
    """SQS queue; entries go in batches of 10 and each entry's result is checked."""

    def __init__(self, queue_url: str, client=None) -> None:
        import boto3

        self.queue_url = queue_url
        region = urlsplit(queue_url).hostname.split(".")[1] if queue_url.count(".") >= 3 else None
        self._client = client or boto3.client("sqs", region_name=region)

    def send(self, entries: Sequence[dict]) -> set[int]:
        from botocore.exceptions import BotoCoreError, ClientError

        failed: set[int] = set()
        for start in range(0, len(entries), 10):
            chunk = range(start, min(start + 10, len(entries)))
            try:
                response = self._client.send_message_batch(
                    QueueUrl=self.queue_url,
                    Entries=[{"Id": str(i), "MessageBody": json.dumps(entries[i], sort_keys=True)} for i in chunk],
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
    raise ValueError(f"unsupported dead-letter URL {url!r}: use sqs:// or file://")
