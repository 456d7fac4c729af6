"""One local SparkSession for the whole test session, and librdkafka's mock cluster."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import Consumer, Producer, TopicPartition


class MockKafka:
    """A 3-broker mock cluster living as long as this object's producer."""

    def __init__(self) -> None:
        self.producer = Producer({"test.mock.num.brokers": 3, "log_level": 3})
        brokers = self.producer.list_topics(timeout=10).brokers.values()
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers)

    @staticmethod
    def topic(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    def produce(self, topic: str, records, partition: int | None = None) -> None:
        """``records``: (key, value, timestamp_ms) tuples; raises unless all are acknowledged."""
        errors = []
        for key, value, ts in records:
            kwargs = {"partition": partition} if partition is not None else {}
            self.producer.produce(topic, key=key, value=value, timestamp=ts,
                                  on_delivery=lambda e, m: e and errors.append(e), **kwargs)
        assert self.producer.flush(15) == 0 and not errors, errors

    def consume_all(self, topic: str) -> list:
        """Every record of ``topic`` up to the current high watermarks (returns as soon as it has
        them: each ``consume`` asks for the records still missing, so it never sits out its timeout)."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": uuid.uuid4().hex,
                             "enable.auto.commit": False, "log_level": 3})
        try:
            metadata = consumer.list_topics(topic, timeout=10).topics[topic]
            out = []
            for p in sorted(metadata.partitions):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                if high <= low:
                    continue
                consumer.assign([TopicPartition(topic, p, low)])
                got = []
                while len(got) < high - low:
                    # exactly what is missing: consume() waits for that many (or the timeout)
                    batch = consumer.consume(min(1000, high - low - len(got)), timeout=5)
                    assert batch, f"{topic}[{p}] stalled at {len(got)}/{high - low}"
                    got += [m for m in batch if m.error() is None]
                out += got
            return out
        finally:
            consumer.close()



@pytest.fixture(scope="session")
def spark(tmp_path_factory) -> Iterator:
    from consolidator.spark.session import build_session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = build_session(
        "consolidator-tests", master="local[2]",
        extra={"spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("warehouse")),
               "spark.driver.memory": "1g"},
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka():
    """librdkafka's mock cluster (in this process; Spark's Python workers reach it over TCP)."""
    return MockKafka()
