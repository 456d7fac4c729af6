"""A local Kafka for the worker scenarios: librdkafka's mock cluster, driven through its C API.

The mock cluster is the one ``consolidator kafka serve`` starts, but held here through ctypes so
that the harness can set what only its C API sets: the KIP-848 (``group.protocol=consumer``)
session timeout, which is the broker's and not a client setting. A SIGKILLed worker then loses
its partitions after ``session_timeout_ms`` instead of the default 45 s. Topics are created up
front with a fixed partition count (a topic created after the workers subscribed is not assigned
on the mock cluster).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import confluent_kafka
from confluent_kafka import Consumer, Producer, TopicPartition

from chaos.servers import ServerError
from consolidator.rules.events import KafkaRecord

RD_KAFKA_PRODUCER = 0


def _library() -> ctypes.CDLL:
    """The librdkafka that confluent-kafka ships (the same build the workers use)."""
    folder = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    found = sorted(folder.glob("librdkafka*.so*"))
    if not found:
        raise ServerError(f"librdkafka is not where confluent-kafka keeps it ({folder})")
    lib = ctypes.CDLL(str(found[0]))
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_size_t]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_handle_mock_cluster.restype = ctypes.c_void_p
    lib.rd_kafka_handle_mock_cluster.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_mock_set_group_consumer_session_timeout_ms.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_set_group_consumer_heartbeat_interval_ms.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    return lib


class MockKafka:
    """One mock cluster for one run: ``bootstrap``, topics made with :meth:`create_topic`."""

    def __init__(self, session_timeout_ms: int = 3000, heartbeat_interval_ms: int = 500) -> None:
        self._lib = _library()
        conf = self._lib.rd_kafka_conf_new()
        error = ctypes.create_string_buffer(512)
        for name, value in (("test.mock.num.brokers", "1"), ("log_level", "3")):
            if self._lib.rd_kafka_conf_set(conf, name.encode(), value.encode(), error, len(error)) != 0:
                raise ServerError(f"mock cluster: {name}: {error.value.decode()}")
        self._rk = self._lib.rd_kafka_new(RD_KAFKA_PRODUCER, conf, error, len(error))
        if not self._rk:
            raise ServerError(f"the mock cluster did not start: {error.value.decode()}")
        self._cluster = self._lib.rd_kafka_handle_mock_cluster(self._rk)
        self.bootstrap = self._lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode()
        self._lib.rd_kafka_mock_set_group_consumer_session_timeout_ms(self._cluster, session_timeout_ms)
        self._lib.rd_kafka_mock_set_group_consumer_heartbeat_interval_ms(self._cluster, heartbeat_interval_ms)
        self._producer: Producer | None = None

    def create_topic(self, topic: str, partitions: int) -> None:
        if self._lib.rd_kafka_mock_topic_create(self._cluster, topic.encode(), partitions, 1) != 0:
            raise ServerError(f"the mock cluster did not create topic {topic!r}")

    def close(self) -> None:
        self._producer = None  # the clients go before their cluster
        if self._rk:
            self._lib.rd_kafka_destroy(self._rk)
            self._rk = None

    def produce(self, records: list[KafkaRecord]) -> list[str]:
        """Produce ``records`` to their partitions, in order, and wait for every acknowledgement;
        the problems (none: every record got the offset its position says)."""
        if self._producer is None:
            self._producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                                       "enable.idempotence": True, "linger.ms": 5, "log_level": 3})
        producer = self._producer
        problems: list[str] = []

        def delivered(error, message, expected: KafkaRecord) -> None:
            if error is not None:
                problems.append(f"{expected.position} not delivered: {error}")
            elif message.offset() != expected.offset:
                problems.append(f"{expected.position} stored at offset {message.offset()}")

        for record in records:
            while True:
                try:
                    producer.produce(record.topic, value=record.value, key=record.key, partition=record.partition,
                                     timestamp=record.timestamp_ms,
                                     on_delivery=lambda e, m, r=record: delivered(e, m, r))
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        if producer.flush(30):
            problems.append("records without a delivery report after 30 s")
        return problems[:5]

    def _consumer(self, group: str) -> Consumer:
        return Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "log_level": 3,
                         "enable.auto.commit": False})

    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int]:
        """The group's committed offsets of ``topic`` (partitions without one left out)."""
        consumer = self._consumer(group)
        try:
            found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
            return {tp.partition: tp.offset for tp in found if tp.offset >= 0}
        finally:
            consumer.close()
