"""Kafka for Spark: Spark's own ``kafka`` format where its connector is on the classpath (EMR,
Glue, Databricks), and a PySpark Python data source on confluent-kafka where it is not.

Both read the same columns (:data:`~consolidator.spark.transforms.SOURCE_SCHEMA`: topic,
partition, offset, timestamp, key, value) with the same options (``kafka.bootstrap.servers``,
``subscribe``, ``startingOffsets``, ``endingOffsets``, ``maxOffsetsPerTrigger``, any other
``kafka.<librdkafka property>``), and write rows of (key, value[, headers][, topic]) to a topic.

Guarantees of the Python data source: offsets are per partition (``{"topic": {"0": next
offset}}``, Spark's own JSON shape), so a micro-batch re-run after a failure reads exactly the
same records; a write succeeds only after every record is acknowledged (``acks=all``);
a failed delivery fails the Spark task, so it is retried (at least once).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)

from consolidator.rules.errors import ConsolidatorError, DeliveryError
from consolidator.support.kafkalog import client_logging

PYTHON_KAFKA_FORMAT = "consolidator_kafka"
SPARK_KAFKA_FORMAT = "kafka"
SPARK_KAFKA_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
Offsets = dict[str, dict[str, int]]  # topic -> partition (as text, JSON keys) -> offset


class KafkaSourceError(ConsolidatorError):
    """The Kafka source cannot resolve topics or offsets, or a read did not reach its end."""


def spark_kafka_available(spark) -> bool:
    """True when Spark's own Kafka connector is on the classpath."""
    from py4j.protocol import Py4JJavaError

    try:
        spark._jvm.java.lang.Class.forName(SPARK_KAFKA_CLASS)
    except Py4JJavaError as error:
        if "ClassNotFoundException" in str(error.java_exception):
            return False
        raise
    return True


def kafka_format(spark, prefer: str = "auto") -> str:
    """The format name to use: ``kafka`` (Spark's connector) when present, otherwise the Python
    data source (registered on ``spark`` here). ``prefer`` = auto | spark | python."""
    if prefer not in ("auto", "spark", "python"):
        raise ValueError(f"prefer must be auto, spark or python, not {prefer!r}")
    if prefer == "spark" or (prefer == "auto" and spark_kafka_available(spark)):
        return SPARK_KAFKA_FORMAT
    spark.dataSource.register(KafkaDataSource)
    return PYTHON_KAFKA_FORMAT


def kafka_reader(spark, bootstrap_servers: str, topic: str, *, streaming: bool, prefer: str = "auto",
                 options: Mapping[str, str] | None = None):
    """``spark.read`` / ``spark.readStream`` configured for ``topic`` with the chosen format."""
    fmt = kafka_format(spark, prefer)
    reader = (spark.readStream if streaming else spark.read).format(fmt)
    reader = reader.option("kafka.bootstrap.servers", bootstrap_servers).option("subscribe", topic)
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    return reader


# -- the Python data source ------------------------------------------------------------------


def _client_config(options: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings from ``kafka.*`` options (Spark's naming)."""
    config = {k.removeprefix("kafka."): v for k, v in options.items() if k.startswith("kafka.")}
    if "bootstrap.servers" not in config:
        raise KafkaSourceError("option kafka.bootstrap.servers is required")
    return config


def _topics(options: Mapping[str, str]) -> list[str]:
    topics = [t.strip() for t in options.get("subscribe", "").split(",") if t.strip()]
    if not topics:
        raise KafkaSourceError("option subscribe (comma-separated topics) is required")
    return topics


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """Records [start, end) of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int


class _OffsetResolver:
    """Watermarks and partition lists, through one lazily created consumer (driver side)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)
        self.config = _client_config(options)
        self.topics = _topics(options)
        self.timeout = float(options.get("kafkaConsumer.pollTimeoutMs", "10000")) / 1000
        self._consumer = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_consumer"] = None  # never ship a live client to executors
        return state

    def consumer(self):
        from confluent_kafka import Consumer

        if self._consumer is None:
            self._consumer = Consumer({**client_logging(), **self.config, "group.id": "consolidator-spark-offsets",
                                       "enable.auto.commit": False})
        return self._consumer

    def watermarks(self) -> dict[str, dict[str, tuple[int, int]]]:
        from confluent_kafka import KafkaException, TopicPartition

        consumer = self.consumer()
        result: dict[str, dict[str, tuple[int, int]]] = {}
        try:
            for topic in self.topics:
                metadata = consumer.list_topics(topic, timeout=self.timeout).topics.get(topic)
                if metadata is None or metadata.error is not None or not metadata.partitions:
                    # not created yet: no partitions, nothing to read (yet)
                    result[topic] = {}
                    continue
                result[topic] = {
                    str(p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=self.timeout)
                    for p in sorted(metadata.partitions)
                }
        except KafkaException as error:
            raise KafkaSourceError(f"cannot read offsets of {self.topics}: {error}") from error
        return result

    def resolve(self, spec: str, default: str) -> Offsets:
        """``earliest`` | ``latest`` | Spark's JSON (``{"t": {"0": 5}}``, -2 earliest, -1 latest)."""
        spec = spec or default
        marks = self.watermarks()
        if spec in ("earliest", "latest"):
            pick = 0 if spec == "earliest" else 1
            return {t: {p: m[pick] for p, m in parts.items()} for t, parts in marks.items()}
        try:
            given = json.loads(spec)
        except json.JSONDecodeError as error:
            raise KafkaSourceError(f"offsets must be earliest, latest or JSON, got {spec!r}") from error
        offsets: Offsets = {}
        for topic, parts in marks.items():
            offsets[topic] = {}
            for p, (low, high) in parts.items():
                value = int(given.get(topic, {}).get(p, -2 if default == "earliest" else -1))
                offsets[topic][p] = low if value == -2 else high if value == -1 else value
        return offsets

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def _ranges(start: Offsets, end: Offsets) -> list[KafkaRange]:
    ranges = []
    for topic in sorted(end):
        for p in sorted(end[topic], key=int):
            first, last = start.get(topic, {}).get(p, 0), end[topic][p]
            if last > first:
                ranges.append(KafkaRange(topic, int(p), first, last))
    return ranges


def _read_range(config: Mapping[str, str], part: KafkaRange, timeout_s: float) -> Iterator[tuple]:
    """Every record of ``part`` in offset order; fails if the range cannot be read to its end."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({**client_logging(), **config, "group.id": "consolidator-spark-reader", "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "error"})
    try:
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        next_offset = part.start
        idle_since = datetime.now(UTC)
        while next_offset < part.end:
            batch = consumer.consume(num_messages=min(10_000, part.end - next_offset), timeout=1.0)
            if not batch and (datetime.now(UTC) - idle_since).total_seconds() > timeout_s:
                raise KafkaSourceError(f"no record of {part} after offset {next_offset} within {timeout_s} s")
            for message in batch:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        if message.offset() >= part.end:  # the rest were gaps (compaction, markers)
                            return
                        continue
                    raise KafkaSourceError(f"reading {part}: {error}")
                offset = message.offset()
                if offset >= part.end:
                    return
                next_offset = offset + 1
                idle_since = datetime.now(UTC)
                _, ts_ms = message.timestamp()
                yield (message.topic(), message.partition(), offset,
                       datetime.fromtimestamp(ts_ms / 1000, UTC), message.key(), message.value())
    finally:
        consumer.close()


class KafkaBatchReader(DataSourceReader):
    """A bounded range: ``startingOffsets`` (default earliest) to ``endingOffsets`` (default latest)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        resolver = _OffsetResolver(options)
        try:
            self.ranges = _ranges(resolver.resolve(options.get("startingOffsets", ""), "earliest"),
                                  resolver.resolve(options.get("endingOffsets", ""), "latest"))
        finally:
            resolver.close()
        self.config = resolver.config
        self.timeout = resolver.timeout

    def partitions(self) -> list[KafkaRange]:
        return self.ranges or [KafkaRange("", 0, 0, 0)]

    def read(self, partition: KafkaRange) -> Iterator[tuple]:
        if partition.end > partition.start:
            yield from _read_range(self.config, partition, self.timeout)


class KafkaStreamReader(DataSourceStreamReader):
    """Micro-batches of offset ranges per partition; new partitions are read from their start."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.resolver = _OffsetResolver(options)
        self.starting = options.get("startingOffsets", "latest")
        limit = options.get("maxOffsetsPerTrigger")
        self.max_per_trigger = int(limit) if limit else None

    def initialOffset(self) -> dict:
        return self.resolver.resolve(self.starting, "latest")

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        """Spark >= 4.1 passes ``start`` and the read limit; Spark 4.0 (EMR's emr-spark-8.0.0)
        passes neither, and gets every available offset (``maxOffsetsPerTrigger`` unenforced)."""
        try:
            from pyspark.sql.streaming.datasource import ReadMaxRows
        except ImportError:  # Spark 4.0
            ReadMaxRows = ()
        start = start or {}
        latest = {t: {p: high for p, (_, high) in parts.items()}
                  for t, parts in self.resolver.watermarks().items()}
        end: Offsets = {}
        for topic, parts in latest.items():
            end[topic] = {p: max(high, start.get(topic, {}).get(p, 0)) for p, high in parts.items()}
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if budget is not None:
            for topic in sorted(end):  # fair enough and deterministic: partitions in order
                for p in sorted(end[topic], key=int):
                    first = start.get(topic, {}).get(p, 0)
                    take = min(end[topic][p] - first, budget)
                    end[topic][p] = first + take
                    budget -= take
        return end

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def partitions(self, start: dict, end: dict) -> list[KafkaRange]:
        return _ranges(start, end)

    def read(self, partition: KafkaRange) -> Iterator[tuple]:
        yield from _read_range(self.resolver.config, partition, self.resolver.timeout)

    def commit(self, end: dict) -> None:
        """Offsets live in Spark's checkpoint; nothing is committed to Kafka."""

    def stop(self) -> None:
        self.resolver.close()


class _KafkaWrite:
    """Produce rows (key, value[, headers][, topic]) and wait until all are acknowledged."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.config = {"acks": "all", "enable.idempotence": "true", **_client_config(options)}
        self.topic = options.get("topic")
        self.timeout = float(options.get("kafka.delivery.timeout.ms", "30000")) / 1000 + 5

    def write(self, rows: Iterator) -> WriterCommitMessage:
        from confluent_kafka import Producer

        producer = Producer({**client_logging(), **self.config})
        errors: list[str] = []

        def delivered(error, message) -> None:
            if error is not None:
                errors.append(f"{message.topic()}[{message.partition()}]: {error}")

        count = 0
        for row in rows:
            fields = row.asDict()
            topic = fields.get("topic") or self.topic
            if not topic:
                raise DeliveryError("no topic: set option topic or a topic column")
            headers = [(h["key"], _bytes(h["value"])) for h in fields.get("headers") or []]
            producer.produce(topic, value=_bytes(fields.get("value")), key=_bytes(fields.get("key")),
                             headers=headers or None, on_delivery=delivered)
            count += 1
            producer.poll(0)
        left = producer.flush(self.timeout)
        if left or errors:
            raise DeliveryError(f"{left} records unacknowledged, {len(errors)} failed: {errors[:3]}")
        return _Written(count)


def _bytes(value):
    """What the producer takes: str encoded; Spark 4.0 gives binary columns as ``bytearray``."""
    if isinstance(value, str):
        return value.encode()
    return bytes(value) if isinstance(value, bytearray) else value


@dataclass
class _Written(WriterCommitMessage):
    count: int


class KafkaBatchWriter(_KafkaWrite, DataSourceWriter):
    pass


class KafkaStreamWriter(_KafkaWrite, DataSourceStreamWriter):
    pass


class KafkaDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("consolidator_kafka")``."""

    @classmethod
    def name(cls) -> str:
        return PYTHON_KAFKA_FORMAT

    def schema(self):
        from consolidator.spark.transforms import SOURCE_SCHEMA

        return SOURCE_SCHEMA

    def reader(self, schema) -> KafkaBatchReader:
        return KafkaBatchReader(self.options)

    def streamReader(self, schema) -> KafkaStreamReader:
        return KafkaStreamReader(self.options)

    def writer(self, schema, overwrite: bool) -> KafkaBatchWriter:
        return KafkaBatchWriter(self.options)

    def streamWriter(self, schema, overwrite: bool) -> KafkaStreamWriter:
        return KafkaStreamWriter(self.options)
