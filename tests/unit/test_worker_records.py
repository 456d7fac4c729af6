"""The Kafka client's messages as the ingest service takes them: records with their position,
timestamp, key, value and headers; a message whose timestamp cannot be read becomes a
``bad_envelope`` piece with its position (dead-lettered, never an exception); client errors
are handed back apart."""

from __future__ import annotations

from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE, KafkaError, Message

from consolidator.rules.events import KafkaRecord, PoisonReason, Rejected, SourcePosition
from consolidator.worker.records import item_offset, item_partition, read_messages


def message(offset: int, timestamp=(TIMESTAMP_CREATE_TIME, 1_795_000_000_000), **kwargs) -> Message:
    return Message(topic="orders", partition=2, offset=offset, key=b"WH-1", value=b'{"a": 1}', timestamp=timestamp,
                   **kwargs)


def test_messages_become_records_in_order_with_their_headers():
    items, errors = read_messages([message(7, headers=[("trace", b"x"), ("empty", None)]), message(8)])
    assert errors == []
    assert items == [
        KafkaRecord("orders", 2, 7, 1_795_000_000_000, b"WH-1", b'{"a": 1}', (("trace", b"x"), ("empty", b""))),
        KafkaRecord("orders", 2, 8, 1_795_000_000_000, b"WH-1", b'{"a": 1}', ()),
    ]
    assert [(item_partition(i), item_offset(i)) for i in items] == [(("orders", 2), 7), (("orders", 2), 8)]


def test_an_unreadable_timestamp_is_a_bad_envelope_piece_with_its_position():
    items, _ = read_messages([message(3, timestamp=(TIMESTAMP_NOT_AVAILABLE, -1)),
                              message(4, timestamp=(TIMESTAMP_CREATE_TIME, -5))])
    assert [type(i) for i in items] == [Rejected, Rejected]
    assert [(i.reason, i.position) for i in items] == [(PoisonReason.BAD_ENVELOPE, SourcePosition("orders", 2, 3)),
                                                      (PoisonReason.BAD_ENVELOPE, SourcePosition("orders", 2, 4))]
    assert items[0].detail == "timestamp not available" and "outside" in items[1].detail
    assert items[0].value_b64 == "eyJhIjogMX0=" and items[0].key_b64 == "V0gtMQ=="
    assert [(item_partition(i), item_offset(i)) for i in items] == [(("orders", 2), 3), (("orders", 2), 4)]


def test_client_errors_are_handed_back_apart():
    error = KafkaError(KafkaError._TRANSPORT, "broker down")
    items, errors = read_messages([Message(error=error), message(1)])
    assert [e.code() for e in errors] == [KafkaError._TRANSPORT] and len(items) == 1
