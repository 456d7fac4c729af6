"""Kafka round trip through the Python data source and the Kafka writer on the mock cluster."""

from __future__ import annotations

import pytest

from consolidator.spark.source import PYTHON_KAFKA_FORMAT, kafka_format, kafka_reader

pytestmark = pytest.mark.spark
T = 1_795_000_000_000


def test_without_the_connector_the_python_source_is_chosen(spark):
    assert kafka_format(spark) == PYTHON_KAFKA_FORMAT
    assert kafka_format(spark, prefer="spark") == "kafka"
    with pytest.raises(ValueError, match="prefer"):
        kafka_format(spark, prefer="jvm")


def test_batch_range_read_then_write_round_trip(spark, kafka):
    source, sink = kafka.topic("in"), kafka.topic("out")
    for p in (0, 1):
        kafka.produce(source, [(f"k{p}".encode(), f"v{p}-{i}".encode(), T + i) for i in range(5)], partition=p)

    df = kafka_reader(spark, kafka.bootstrap, source, streaming=False, prefer="python",
                      options={"startingOffsets": f'{{"{source}": {{"0": 1}}}}',
                               "endingOffsets": f'{{"{source}": {{"0": 4, "1": -1}}}}'}).load()
    assert df.columns == ["topic", "partition", "offset", "timestamp", "key", "value"]
    rows = sorted((r.partition, r.offset, bytes(r.value), int(r.timestamp.timestamp() * 1000))
                  for r in df.collect())
    assert rows == [(0, i, f"v0-{i}".encode(), T + i) for i in (1, 2, 3)] + [
        (1, i, f"v1-{i}".encode(), T + i) for i in range(5)]

    df.selectExpr("key", "value").write.format(PYTHON_KAFKA_FORMAT).mode("append") \
        .option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", sink).save()
    assert sorted(m.value() for m in kafka.consume_all(sink)) == sorted(r[2] for r in rows)


def test_streaming_read_resumes_from_checkpoint_and_writes_to_kafka(spark, kafka, tmp_path):
    source, sink = kafka.topic("sin"), kafka.topic("sout")
    kafka.produce(source, [(b"k", f"a{i}".encode(), T) for i in range(6)], partition=0)

    def run() -> None:
        stream = kafka_reader(spark, kafka.bootstrap, source, streaming=True, prefer="python",
                              options={"startingOffsets": "earliest", "maxOffsetsPerTrigger": "4"}).load()
        query = (stream.selectExpr("key", "upper(cast(value AS string)) AS value").writeStream
                 .format(PYTHON_KAFKA_FORMAT).option("kafka.bootstrap.servers", kafka.bootstrap)
                 .option("topic", sink).option("checkpointLocation", str(tmp_path / "ckpt"))
                 .trigger(processingTime="200 milliseconds").start())
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    run()
    assert sorted(m.value() for m in kafka.consume_all(sink)) == [f"A{i}".encode() for i in range(6)]
    kafka.produce(source, [(b"k", b"late", T)], partition=0)
    run()  # restarts from the checkpoint: only the new record is read
    assert sorted(m.value() for m in kafka.consume_all(sink)) == [f"A{i}".encode() for i in range(6)] + [b"LATE"]
