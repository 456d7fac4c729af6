"""Messages of the Kafka client as the ingest service takes them: a :class:`KafkaRecord` for each
readable message, a :class:`~consolidator.rules.events.Rejected` piece (with its position, so it is
dead-lettered as ``bad_envelope`` poison) for one whose envelope cannot be read, as the MSK
event's reader does for Lambda (:mod:`consolidator.sources.msk`): the same bounds, the same reason.

Never raises for a message; a consumer error (not a message) is returned as text for the poll
loop to log.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, Message

from consolidator.rules.events import KafkaRecord, PoisonReason, Rejected, SourcePosition
from consolidator.sources.msk import MAX_TIMESTAMP_MS

Item = KafkaRecord | Rejected  # what the worker holds of one message until it is durable
_new = tuple.__new__  # a KafkaRecord of all its fields, built in C (its Python-level __new__ costs a call per message)


def item_offset(item: Item) -> int:
    return item.offset if type(item) is KafkaRecord else item.position.offset


def item_partition(item: Item) -> tuple[str, int]:
    return (item.topic, item.partition) if type(item) is KafkaRecord else (item.position.topic,
                                                                          item.position.partition)


def _headers(message: Message) -> tuple[tuple[str, bytes], ...]:
    headers = message.headers()
    if not headers:
        return ()
    return tuple((name, b"" if value is None else value) for name, value in headers)


def _rejected(message: Message, detail: str) -> Rejected:
    key, value = message.key(), message.value()
    return Rejected(PoisonReason.BAD_ENVELOPE, detail,
                    {"topic": message.topic(), "partition": message.partition(), "offset": message.offset()},
                    SourcePosition(message.topic(), message.partition(), message.offset()),
                    timestamp_ms=None,
                    key_b64=None if key is None else base64.b64encode(key).decode(),
                    value_b64=None if value is None else base64.b64encode(value).decode())


def read_messages(messages: Iterable[Message]) -> tuple[list[Item], list[KafkaError]]:
    """The items of ``messages`` in their order, and the client's errors among them."""
    items: list[Item] = []
    errors: list[KafkaError] = []
    append = items.append
    for message in messages:
        error = message.error()
        if error is not None:
            errors.append(error)
            continue
        kind, timestamp = message.timestamp()
        if kind == TIMESTAMP_NOT_AVAILABLE or not 0 <= timestamp <= MAX_TIMESTAMP_MS:
            append(_rejected(message, "timestamp not available" if kind == TIMESTAMP_NOT_AVAILABLE
                             else f"timestamp {timestamp} is outside [0, {MAX_TIMESTAMP_MS}]"))
            continue
        append(_new(KafkaRecord, (message.topic(), message.partition(), message.offset(), timestamp, message.key(),
                                  message.value(), _headers(message))))
    return items, errors
