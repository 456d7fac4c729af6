"""DataFrame transforms shared by the streaming and the replay job.

Every source (Spark's ``kafka`` format, the confluent-kafka Python data source, JSON lines,
Parquet) is first brought to :data:`RECORD_SCHEMA` by :func:`records`; :func:`decode` then runs
:func:`consolidator.events.decode` on each record, so validation is the Lambda path's own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from consolidator.events import FieldNames, KafkaRecord, PoisonEvent
from consolidator.events import decode as decode_record

POISON_GROUP = ""  # group column of poison records: valid group keys are never empty

#: The columns every source yields (Spark's own Kafka source has these names and types).
SOURCE_SCHEMA = T.StructType([
    T.StructField("topic", T.StringType(), False),
    T.StructField("partition", T.IntegerType(), False),
    T.StructField("offset", T.LongType(), False),
    T.StructField("timestamp", T.TimestampType(), False),
    T.StructField("key", T.BinaryType(), True),
    T.StructField("value", T.BinaryType(), True),
])

#: After :func:`records`: the timestamp as epoch milliseconds.
RECORD_SCHEMA = T.StructType([
    T.StructField("timestamp_ms", T.LongType(), False) if f.name == "timestamp" else f
    for f in SOURCE_SCHEMA.fields
])

#: After :func:`decode`. Valid events: ``group_key`` non-empty, ``value`` null (the items say it
#: all). Poison: ``group_key`` = :data:`POISON_GROUP`, ``value`` kept for the dead-letter entry.
DECODED_SCHEMA = T.StructType([
    *RECORD_SCHEMA.fields,
    T.StructField("group_key", T.StringType(), False),
    T.StructField("item_id", T.StringType(), True),
    T.StructField("items", T.StringType(), True),  # JSON [[sku, quantity], ...]
    T.StructField("poison_reason", T.StringType(), True),
    T.StructField("poison_detail", T.StringType(), True),
])

#: JSON-lines input of the replay job: ``value`` as text, or ``value_b64`` for any bytes.
JSON_INPUT_SCHEMA = T.StructType([
    T.StructField("topic", T.StringType()),
    T.StructField("partition", T.IntegerType()),
    T.StructField("offset", T.LongType()),
    T.StructField("timestamp", T.LongType()),
    T.StructField("key", T.StringType()),
    T.StructField("value", T.StringType()),
    T.StructField("key_b64", T.StringType()),
    T.StructField("value_b64", T.StringType()),
])


def records(df: DataFrame) -> DataFrame:
    """Any source frame -> :data:`RECORD_SCHEMA`. ``timestamp`` may be a timestamp or epoch ms."""
    missing = {"topic", "partition", "offset", "timestamp", "key", "value"} - set(df.columns)
    if missing:
        raise ValueError(f"record frame lacks columns {sorted(missing)}; it has {df.columns}")
    ts_type = df.schema["timestamp"].dataType
    if isinstance(ts_type, (T.TimestampType, T.TimestampNTZType)):
        timestamp_ms = F.unix_millis(F.col("timestamp"))
    elif isinstance(ts_type, (T.LongType, T.IntegerType)):
        timestamp_ms = F.col("timestamp").cast("long")
    else:
        raise TypeError(f"timestamp must be a timestamp or epoch milliseconds, not {ts_type.simpleString()}")

    def as_binary(name: str) -> Column:
        column = F.col(name)
        b64 = f"{name}_b64"
        if b64 in df.columns:
            return F.coalesce(F.unbase64(F.col(b64)), F.encode(column.cast("string"), "UTF-8"))
        if isinstance(df.schema[name].dataType, T.BinaryType):
            return column
        return F.encode(column.cast("string"), "UTF-8")

    return df.select(
        F.col("topic").cast("string").alias("topic"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        timestamp_ms.alias("timestamp_ms"),
        as_binary("key").alias("key"),
        as_binary("value").alias("value"),
    )


def read_record_files(spark: SparkSession, path: str, fmt: str = "json") -> DataFrame:
    """Historical records from JSON lines (one record object per line) or Parquet."""
    if fmt == "json":
        return records(spark.read.schema(JSON_INPUT_SCHEMA).json(path))
    if fmt == "parquet":
        return records(spark.read.parquet(path))
    raise ValueError(f"unsupported input format {fmt!r}: use json or parquet")


def _decoder(names: FieldNames, max_event_bytes: int):
    import pyarrow as pa

    out_schema = pa.schema([
        ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
        ("timestamp_ms", pa.int64()), ("key", pa.binary()), ("value", pa.binary()),
        ("group_key", pa.string()), ("item_id", pa.string()), ("items", pa.string()),
        ("poison_reason", pa.string()), ("poison_detail", pa.string()),
    ])

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            cols = batch.to_pydict()
            groups, item_ids, items, reasons, details, values = [], [], [], [], [], []
            for topic, partition, offset, ts, key, value in zip(
                cols["topic"], cols["partition"], cols["offset"], cols["timestamp_ms"],
                cols["key"], cols["value"], strict=True,
            ):
                try:
                    event = decode_record(KafkaRecord(topic, partition, offset, ts, key, value),
                                          names, max_event_bytes)
                except PoisonEvent as poison:
                    groups.append(POISON_GROUP)
                    item_ids.append(None)
                    items.append(None)
                    reasons.append(str(poison.reason))
                    details.append(poison.detail)
                    values.append(value)
                    continue
                groups.append(event.group_key)
                item_ids.append(event.item_id)
                items.append(json.dumps(event.items, separators=(",", ":"), ensure_ascii=False))
                reasons.append(None)
                details.append(None)
                values.append(None)
            yield pa.RecordBatch.from_arrays(
                [batch.column("topic"), batch.column("partition"), batch.column("offset"),
                 batch.column("timestamp_ms"), batch.column("key"), pa.array(values, pa.binary()),
                 pa.array(groups, pa.string()), pa.array(item_ids, pa.string()),
                 pa.array(items, pa.string()), pa.array(reasons, pa.string()),
                 pa.array(details, pa.string())],
                schema=out_schema,
            )

    return run


def decode(df: DataFrame, names: FieldNames, max_event_bytes: int) -> DataFrame:
    """:data:`RECORD_SCHEMA` -> :data:`DECODED_SCHEMA` with the Lambda path's validation."""
    return df.select(*RECORD_SCHEMA.fieldNames()).mapInArrow(_decoder(names, max_event_bytes), DECODED_SCHEMA)


def parse_items(text: str) -> tuple[tuple[str, int], ...]:
    """The ``items`` column back to the tuple :class:`~consolidator.events.Event` carries."""
    return tuple((sku, quantity) for sku, quantity in json.loads(text))
