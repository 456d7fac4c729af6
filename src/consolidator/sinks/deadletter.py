"""Where poison events, expired rows and dead batches go: SQS (default in AWS) or a JSON-lines
file (local). The entries themselves are built in :mod:`consolidator.rules.deadletter`.

A write counts only when the destination confirmed it; ``send`` returns the indexes of the
entries that were not confirmed, so the caller can report them for retry instead of losing them.
Every entry is size-checked and bounded (:func:`encode_entry`) before it is sent, one by one: an
entry never makes the entries beside it fail.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from consolidator.rules.deadletter import encode_entry
from consolidator.support import jsonlines
from consolidator.support.redact import masked

log = logging.getLogger("consolidator.deadletter")

__all__ = ["DeadLetter", "FileDeadLetter", "SqsDeadLetter", "dead_letter_from_url", "encode_all"]


def encode_all(entries: Sequence[dict], max_bytes: int) -> tuple[dict[int, str], set[int]]:
    """Each entry as JSON of at most ``max_bytes`` (:func:`encode_entry`), and the indexes of the
    entries that cannot be made to fit (logged; reported unconfirmed, never sent cut)."""
    bodies: dict[int, str] = {}
    unfit: set[int] = set()
    for index, entry in enumerate(entries):
        try:
            bodies[index] = encode_entry(entry, max_bytes)
        except ValueError as error:
            log.error("dead-letter entry cannot fit its destination", extra={"error": str(error)})
            unfit.add(index)
    return bodies, unfit

SQS_MAX_BYTES = 256 * 1024  # one SQS message, and one SendMessageBatch call, at most
FILE_MAX_BYTES = SQS_MAX_BYTES  # a file entry is bounded as on SQS: local runs see what AWS would


class DeadLetter(Protocol):
    def send(self, entries: Sequence[dict]) -> set[int]:
        """Write ``entries``; return the indexes that were NOT confirmed (empty set = all durable)."""
        ...


@dataclass
class FileDeadLetter:
    """Appends JSON lines and fsyncs before confirming. For local runs and the demo.
    Crash-atomic per line (:mod:`consolidator.support.jsonlines`): no reader sees a torn entry."""

    path: Path

    def send(self, entries: Sequence[dict]) -> set[int]:
        if not entries:
            return set()
        bodies, unfit = encode_all(entries, FILE_MAX_BYTES)
        try:
            jsonlines.append(self.path, (body.encode() for body in bodies.values()))
        except OSError:
            return set(range(len(entries)))
        return unfit

    def read(self) -> list[dict]:
        """Every complete entry (a torn tail is never an entry)."""
        return jsonlines.read(self.path)


class SqsDeadLetter:
    """SQS queue; entries go in calls of at most 10 entries and 256 KiB, each entry's result
    is checked; an entry too large for one message is shortened (:func:`encode_entry`)."""

    def __init__(self, queue_url: str, client=None) -> None:
        import boto3

        self.queue_url = queue_url
        region = urlsplit(queue_url).hostname.split(".")[1] if queue_url.count(".") >= 3 else None
        self._client = client or boto3.client("sqs", region_name=region)

    def send(self, entries: Sequence[dict]) -> set[int]:
        from botocore.exceptions import BotoCoreError, ClientError

        from consolidator.sinks import chunk_by_size

        bodies, failed = encode_all(entries, SQS_MAX_BYTES)
        sizes = {i: len(body.encode()) for i, body in bodies.items()}
        for chunk in chunk_by_size(list(bodies), sizes, 10, SQS_MAX_BYTES):
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
