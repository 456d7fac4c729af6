"""Kafka sink (confluent-kafka): idempotent producer, ``acks=all``, key = group key,
headers ``batch_id`` and ``traceparent`` (the batch's W3C context, when it has one:
:class:`~consolidator.sinks.OutgoingBatch`); optional MSK IAM auth (SASL OAUTHBEARER via aws-msk-iam-sasl-signer).

A batch counts as delivered only when its delivery report arrived without error within
``flush_timeout_s``. A message still in flight at the timeout is reported as failed; if it
lands later, the re-publish of the same batch id is a harmless duplicate.

Size: a broker accepts a record batch up to its ``message.max.bytes`` (topic:
``max.message.bytes``), 1,048,588 bytes by default. A message whose value, key and headers
exceed ``record_limit`` (default 1,000,000, URL ``?max_message_bytes=``; raise it only
with the topic's limit) is reported failed without being produced. The sink's
``max_message_bytes`` (the largest message body, the default byte cap of batches) is that limit
less :data:`KEY_AND_HEADER_BYTES`, so a batch within the cap always fits with its key and header.
librdkafka chunks the produce requests itself.

A body is measured as it is sent: the record's value is the encoded message's bytes as they are
(``measure_body`` is ``len``); the key (the group key's UTF-8 bytes) and the header are counted
apart, within :data:`KEY_AND_HEADER_BYTES`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from confluent_kafka import KafkaError, KafkaException, Producer

from consolidator.rules.errors import DeliveryError
from consolidator.sinks import OutgoingBatch
from consolidator.support.kafkalog import client_logging

MAX_MESSAGE_BYTES = 1_000_000  # under the broker's default message.max.bytes (1,048,588)
# the longest group key (UTF-8), the batch id header and the traceparent header
KEY_AND_HEADER_BYTES = 4 * 191 + len("batch_id") + 32 + len("traceparent") + 55


def msk_iam_oauth_cb(region: str | None):
    """librdkafka's ``oauth_cb`` for MSK IAM: a token signed with the process's AWS credentials
    (the default chain), refreshed by the client before it expires. Shared by the sink's producer
    and the worker's consumer."""

    def callback(_config: str) -> tuple[str, float]:
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider

        token, expiry_ms = MSKAuthTokenProvider.generate_auth_token(region)
        return token, expiry_ms / 1000

    return callback


class KafkaSink:
    measure_body = staticmethod(len)  # the record's value is the encoded message as it is
    messaging_system = "kafka"  # the publish span's messaging.system

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        iam: bool = False,
        iam_region: str | None = None,
        flush_timeout_s: float = 30.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        extra_config: dict | None = None,
    ) -> None:
        self.topic = self.destination = topic
        self.flush_timeout_s = flush_timeout_s
        if max_message_bytes <= KEY_AND_HEADER_BYTES:
            raise ValueError(f"kafka sink max_message_bytes must be over {KEY_AND_HEADER_BYTES} (room for the"
                             f" group key and the batch id header), got {max_message_bytes}")
        self.record_limit = max_message_bytes  # value, key and headers
        self.max_message_bytes = max_message_bytes - KEY_AND_HEADER_BYTES  # the largest body
        config = {
            **client_logging(),
            "bootstrap.servers": bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "zstd",
            "message.max.bytes": max(4_000_000, max_message_bytes + 4096),
            "message.timeout.ms": int(flush_timeout_s * 1000),
        }
        if iam:
            if not iam_region:
                raise ValueError("kafka sink with auth=iam needs region=<aws region>")
            config |= {
                "security.protocol": "SASL_SSL",
                "sasl.mechanisms": "OAUTHBEARER",
                "oauth_cb": msk_iam_oauth_cb(iam_region),
            }
        config |= extra_config or {}
        self._producer = Producer(config)

    def publish(self, batches: Sequence[OutgoingBatch]) -> dict[int, str]:
        if self._producer is None:
            raise DeliveryError("kafka sink is closed")
        errors: dict[int, str] = {}
        delivered: set[int] = set()

        def report(index: int):
            def on_delivery(err: KafkaError | None, _msg) -> None:
                if err is None:
                    delivered.add(index)
                else:
                    errors[index] = f"kafka delivery failed: {err.str()}"

            return on_delivery

        for index, batch in enumerate(batches):
            headers = [("batch_id", batch.batch_id.encode())]
            if batch.traceparent is not None:
                headers.append(("traceparent", batch.traceparent.encode()))
            size = self.measure_body(batch.body) + len(batch.group_key.encode()) + sum(len(n) + len(v) for n, v in headers)
            if size > self.record_limit:
                errors[index] = f"kafka message of {size} bytes is over the {self.record_limit}-byte limit"
                continue
            send = functools.partial(
                self._producer.produce, self.topic, key=batch.group_key.encode(), value=batch.body,
                headers=headers, on_delivery=report(index),
            )
            try:
                try:
                    send()
                except BufferError:
                    self._producer.poll(1.0)  # queue full: serve delivery reports, then try once more
                    send()
            except (BufferError, KafkaException) as exc:
                errors[index] = f"kafka produce failed: {exc}"
            self._producer.poll(0)
        self._producer.flush(self.flush_timeout_s)
        for index in range(len(batches)):
            if index not in delivered and index not in errors:
                errors[index] = f"kafka delivery not confirmed within {self.flush_timeout_s}s"
        return errors

    def close(self) -> None:
        """Flush, then release the producer (its threads stop now, not at interpreter exit)."""
        if self._producer is not None:
            self._producer.flush(self.flush_timeout_s)
            self._producer = None
