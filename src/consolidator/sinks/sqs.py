"""SQS sink: one message per batch, attributes ``batch_id`` and ``group_key``. On a FIFO
queue (``.fifo``) the group key is the message group and the batch id the deduplication id."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from consolidator.sinks import OutgoingBatch

MAX_BATCH_BYTES = 256 * 1024  # SendMessageBatch payload limit (all entries together)


class SqsSink:
    def __init__(self, queue_url: str, client=None) -> None:
        import boto3

        self.queue_url = queue_url
        host = urlsplit(queue_url).hostname or ""
        region = host.split(".")[1] if host.count(".") >= 3 else None
        self._client = client or boto3.client("sqs", region_name=region)
        self._fifo = queue_url.endswith(".fifo")

    def _entry(self, index: int, batch: OutgoingBatch) -> dict:
        entry = {
            "Id": str(index),
            "MessageBody": batch.body.decode(),
            "MessageAttributes": {
                "batch_id": {"DataType": "String", "StringValue": batch.batch_id},
                "group_key": {"DataType": "String", "StringValue": batch.group_key},
            },
        }
        if self._fifo:
            entry |= {"MessageGroupId": batch.group_key, "MessageDeduplicationId": batch.batch_id}
        return entry

    def publish(self, batches: Sequence[OutgoingBatch]) -> dict[int, str]:
        from botocore.exceptions import BotoCoreError, ClientError

        errors: dict[int, str] = {}
        chunks: list[list[int]] = []
        size = 0
        for index, batch in enumerate(batches):
            weight = len(batch.body) + 200
            if not chunks or len(chunks[-1]) == 10 or size + weight > MAX_BATCH_BYTES:
                chunks.append([])
                size = 0
            chunks[-1].append(index)
            size += weight
        for chunk in chunks:
            try:
                response = self._client.send_message_batch(
                    QueueUrl=self.queue_url, Entries=[self._entry(i, batches[i]) for i in chunk]
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
