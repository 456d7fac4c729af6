"""The client helper downstream code acknowledges batch members with (see
:mod:`consolidator.rules.completion` for the messages and the guarantees)."""

from __future__ import annotations

from collections.abc import Sequence

from consolidator.rules.completion import Ack, AckFormatError
from consolidator.rules.printable import echoed


class AckClient:
    """Send acks from downstream code to the acks queue (SQS). No database access.

    ``ack`` returns once SQS accepted the message; the acks function applies it later
    (idempotently, so sending an ack twice is harmless). Errors raise
    :class:`~consolidator.rules.errors.DeliveryError` naming the batch."""

    def __init__(self, queue_url: str, client=None) -> None:
        if not queue_url.startswith("https://"):
            raise ValueError(f"acks queue URL must be https://sqs.<region>.amazonaws.com/<account>/<queue>, "
                             f"got {queue_url!r}")
        self.queue_url = queue_url
        if client is None:
            import boto3

            host = queue_url.split("/")[2]
            client = boto3.client("sqs", region_name=host.split(".")[1] if host.count(".") >= 3 else None)
        self._client = client

    def ack(self, message: dict, *, item_ids: Sequence[str] = (), members: Sequence[int] = ()) -> None:
        """Acknowledge members of one received batch ``message`` (the decoded batch message: its
        ``batch_id`` and ``ack_token`` go into the ack) by item id and/or by index."""
        if "ack_token" not in message:
            raise AckFormatError(f"batch {echoed(message.get('batch_id'))} is not tracked: its message has no ack_token")
        self.send([Ack(message["batch_id"], tuple(members), tuple(item_ids), message["ack_token"])])

    def send(self, acks: Sequence[Ack]) -> None:
        """Send several acks, ten per SQS call; raises on the first chunk SQS did not fully take."""
        from botocore.exceptions import BotoCoreError, ClientError

        from consolidator.rules.errors import DeliveryError

        for start in range(0, len(acks), 10):
            chunk = acks[start:start + 10]
            try:
                response = self._client.send_message_batch(
                    QueueUrl=self.queue_url,
                    Entries=[{"Id": str(i), "MessageBody": a.encode().decode()} for i, a in enumerate(chunk)],
                )
            except (BotoCoreError, ClientError) as error:
                raise DeliveryError(f"acks not sent (batches {[a.batch_id for a in chunk]}): {error}") from error
            if response.get("Failed"):
                failed = [chunk[int(f["Id"])].batch_id for f in response["Failed"]]
                raise DeliveryError(f"SQS refused acks of batches {failed}: {response['Failed'][0].get('Code')}")
