"""SQS sink: one message per batch, attributes ``batch_id`` and ``group_key``. On a FIFO
queue (``.fifo``) the group key is the message group and the batch id the deduplication id.
A group key SQS would refuse in an attribute or as a group id is encoded, and the message says
so in an attribute (:mod:`consolidator.sinks.sqs_text`); the body escapes what SQS refuses.

SendMessageBatch limits: at most 10 entries per call; one message and all messages of one
call together at most 256 KiB (262,144 bytes), message attributes (name, type and value)
included. Requests are chunked by count and by size; a message over the limit is reported
failed without being sent. (SQS has since raised its limit to 1 MiB; 256 KiB holds on every
queue and region.)

A body is measured as it is sent: the encoded message with each character SQS refuses written
as a 6-byte ``\\uXXXX`` escape (:func:`~consolidator.sinks.sqs_text.escaped_bytes`, the sink's
``measure_body``), so a message of U+FFFF characters counts twice its UTF-8 size against the
byte cap, and a batch under the cap is never refused for its size."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from consolidator.sinks import DEFAULT_TIMEOUT_S, OutgoingBatch, aws_client_config, chunk_by_size
from consolidator.sinks.sqs_text import escape_json, escaped_bytes, group_id, key_attribute

MAX_BATCH_BYTES = 256 * 1024  # one message, and all entries of one SendMessageBatch together
MAX_ENTRIES = 10
ATTRIBUTE_RESERVE = 2048  # attributes: names, types, batch id, group key (base64: up to 1,020), encodings, traceparent


class SqsSink:
    measure_body = staticmethod(escaped_bytes)  # the body as sent, escapes included
    messaging_system = "aws_sqs"  # the publish span's messaging.system

    def __init__(self, queue_url: str, client=None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        import boto3

        self.queue_url = queue_url
        self.destination = queue_url.rsplit("/", 1)[-1]  # the queue's name
        host = urlsplit(queue_url).hostname or ""
        region = host.split(".")[1] if host.count(".") >= 3 else None
        self._client = client or boto3.client("sqs", region_name=region, config=aws_client_config(timeout_s))
        self._fifo = queue_url.endswith(".fifo")
        self.max_message_bytes = MAX_BATCH_BYTES - ATTRIBUTE_RESERVE  # the largest body, escaped

    @staticmethod
    def message_bytes(entry: dict) -> int:
        """The message's size as SQS counts it: body plus each attribute's name, type and value."""
        size = len(entry["MessageBody"].encode())
        for name, attribute in entry["MessageAttributes"].items():
            size += len(name.encode()) + len(attribute["DataType"].encode()) + len(attribute["StringValue"].encode())
        return size

    def _entry(self, index: int, batch: OutgoingBatch) -> dict:
        key, key_encoding = key_attribute(batch.group_key)
        attributes = {
            "batch_id": {"DataType": "String", "StringValue": batch.batch_id},
            "group_key": {"DataType": "String", "StringValue": key},
        }
        if batch.traceparent is not None:
            attributes["traceparent"] = {"DataType": "String", "StringValue": batch.traceparent}
        if key_encoding is not None:
            attributes["group_key_encoding"] = {"DataType": "String", "StringValue": key_encoding}
        entry = {"Id": str(index), "MessageBody": escape_json(batch.body.decode()), "MessageAttributes": attributes}
        if self._fifo:
            group, group_encoding = group_id(batch.group_key)
            entry |= {"MessageGroupId": group, "MessageDeduplicationId": batch.batch_id}
            if group_encoding is not None:
                attributes["group_id_encoding"] = {"DataType": "String", "StringValue": group_encoding}
        return entry

    def publish(self, batches: Sequence[OutgoingBatch]) -> dict[int, str]:
        from botocore.exceptions import BotoCoreError, ClientError

        errors: dict[int, str] = {}
        entries = [self._entry(i, b) for i, b in enumerate(batches)]
        sizes = [self.message_bytes(e) for e in entries]
        for i, size in enumerate(sizes):
            if size > MAX_BATCH_BYTES:
                errors[i] = f"sqs message of {size} bytes is over the {MAX_BATCH_BYTES}-byte limit"
        sendable = [i for i in range(len(batches)) if i not in errors]
        for chunk in chunk_by_size(sendable, sizes, MAX_ENTRIES, MAX_BATCH_BYTES):
            try:
                response = self._client.send_message_batch(
                    QueueUrl=self.queue_url, Entries=[entries[i] for i in chunk]
                )
            except (BotoCoreError, ClientError) as exc:
                errors.update({i: f"sqs send failed: {exc}" for i in chunk})
                continue
            for failure in response.get("Failed", []):
                errors[int(failure["Id"])] = f"sqs rejected: {failure.get('Code')} {failure.get('Message', '')}"
            confirmed = {int(ok["Id"]) for ok in response.get("Successful", [])}
            for i in chunk:
                if i not in confirmed and i not in errors:
                    errors[i] = "sqs did not confirm the message"
        return errors

    def close(self) -> None:
        pass
