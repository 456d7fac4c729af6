"""DataFrame transforms shared by the streaming and the replay job.

Every source (Spark's ``kafka`` format, the confluent-kafka Python data source, JSON lines,
Parquet) is first brought to :data:`RECORD_SCHEMA` by :func:`records`; :func:`decode` then
decodes in the JVM what it can prove valid and hands the rest to :func:`consolidator.events.decode`,
so results (group keys, items, poison reasons) are exactly the Lambda path's.
"""

from __future__ import annotations

import json

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from consolidator.events import MAX_KEY_CHARS, FieldNames, KafkaRecord, PoisonEvent
from consolidator.events import decode as decode_record
from consolidator.spark.packing import POISON_GROUP

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


# -- decode: a JVM fast path that hands everything it cannot prove valid to events.decode ------


def fast_schema(names: FieldNames) -> T.StructType | None:
    """The fields the fast path reads, in the order it expects them (None: names collide)."""
    if len({names.group_key, names.item_id, names.items}) < 3 or names.sku == names.quantity:
        return None
    item = T.StructType([T.StructField(names.sku, T.StringType()), T.StructField(names.quantity, T.LongType())])
    return T.StructType([T.StructField(names.group_key, T.StringType()),
                         T.StructField(names.item_id, T.StringType()),
                         T.StructField(names.items, T.ArrayType(item))])


def fast_decode(value: Column, schema: T.StructType, max_event_bytes: int) -> Column:
    """struct<ok, group_key, item_id, items>, ``ok`` only where ``events.decode`` provably gives
    this group key, item id and items.

    The proof: the value is valid UTF-8 without a backslash (no escapes), Spark's ``from_json``
    reads it, and ``to_json`` writes back exactly the same text. Then the value is compact JSON
    holding just these fields in this order, with string ids, an items list of objects with a
    string sku and an integer quantity, nothing duplicated, nothing after the object: a document
    orjson reads to the same values. Identifier lengths, empty skus and negative quantities are
    checked as ``events.decode`` checks them. Any other value (poison, other layouts, escapes,
    extra fields) is not proven and goes to Python."""
    group, item, items = (f.name for f in schema.fields)
    sku, quantity = (f.name for f in schema[items].dataType.elementType.fields)
    text = value.cast("string")
    size = F.octet_length(value)
    worth_parsing = (F.when(value.isNull() | (size < 1) | (size > max_event_bytes), False)
                     .when(~F.startswith(text, F.lit(f'{{"{group}":"')) | (F.instr(text, "\\") > 0), False)
                     .otherwise(F.is_valid_utf8(value)))

    def identifier(parsed: Column, name: str) -> Column:
        return F.char_length(parsed[name]).between(1, MAX_KEY_CHARS)

    def proven_item(x: Column) -> Column:
        return x.isNotNull() & (F.char_length(x[sku]) > 0) & (x[quantity] >= 0)

    def checked(parsed: Column) -> Column:
        proven = ((F.to_json(parsed) == text) & identifier(parsed, group) & identifier(parsed, item)
                  & (parsed[items].isNull() | F.forall(parsed[items], proven_item)))
        as_json = F.concat(F.lit("["), F.array_join(F.transform(parsed[items], lambda x: F.concat(
            F.lit('["'), x[sku], F.lit('",'), x[quantity].cast("string"), F.lit("]"))), ","), F.lit("]"))
        return F.struct(F.coalesce(proven, F.lit(False)).alias("ok"), parsed[group].alias("group_key"),
                        parsed[item].alias("item_id"), F.coalesce(as_json, F.lit("[]")).alias("items"))

    # from_json once per record: bound to a lambda variable, Spark's JSON optimisation cannot split
    # it into one parse per field read
    result = F.transform(F.array(F.from_json(text, schema)), checked)[0]
    return F.when(worth_parsing, result).otherwise(not_proven())


def not_proven() -> Column:
    return F.struct(F.lit(False).alias("ok"), *(F.lit(None).cast("string").alias(n)
                                                for n in ("group_key", "item_id", "items")))


_FALLBACK_TYPE = "group_key string, item_id string, items string, poison_reason string, poison_detail string"


def decode_value(value: bytes, names: FieldNames, max_event_bytes: int) -> dict[str, str]:
    """``events.decode`` of one value as the decoded columns: ``group_key``, ``item_id`` and
    ``items`` (JSON), or, for poison, :data:`POISON_GROUP` with ``poison_reason`` and ``poison_detail``."""
    try:
        event = decode_record(KafkaRecord("", 0, 0, 0, None, value), names, max_event_bytes)
    except PoisonEvent as poison:
        return {"group_key": POISON_GROUP, "poison_reason": str(poison.reason), "poison_detail": poison.detail}
    return {"group_key": event.group_key, "item_id": event.item_id,
            "items": json.dumps(event.items, separators=(",", ":"), ensure_ascii=False)}


def _fallback(names: FieldNames, max_event_bytes: int):
    """Arrow UDF: ``events.decode`` on the non-null values (the records the fast path left);
    nulls elsewhere. Poison gets :data:`POISON_GROUP` and its reason and detail."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out_type = pa.struct([("group_key", pa.string()), ("item_id", pa.string()), ("items", pa.string()),
                          ("poison_reason", pa.string()), ("poison_detail", pa.string())])

    def fallback(value: pa.Array) -> pa.Array:
        count = len(value)
        todo = pc.indices_nonzero(pc.is_valid(value)).to_pylist()
        if not todo:
            return pa.nulls(count, out_type)
        rows: list[dict | None] = [None] * count
        for index in todo:
            rows[index] = decode_value(value[index].as_py(), names, max_event_bytes)
        return pa.array(rows, out_type)

    fallback.__annotations__ = {"value": pa.Array, "return": pa.Array}  # resolved here, not as strings
    if hasattr(F, "arrow_udf"):  # Spark >= 4.1
        return F.arrow_udf(fallback, _FALLBACK_TYPE)
    return _as_pandas_udf(fallback, out_type)


def _as_pandas_udf(fallback, out_type):
    """Spark 4.0 (EMR's emr-spark-8.0.0) has no ``arrow_udf``: the same function as a pandas
    UDF. A null row comes back as a struct of nulls, which ``decode`` reads the same way."""
    import pandas as pd
    import pyarrow as pa

    def fallback_pandas(value: pd.Series) -> pd.DataFrame:
        result = fallback(pa.Array.from_pandas(value, type=pa.binary()))
        return pd.DataFrame({field.name: column.to_pandas()
                             for field, column in zip(out_type, result.flatten(), strict=True)})

    fallback_pandas.__annotations__ = {"value": pd.Series, "return": pd.DataFrame}
    return F.pandas_udf(fallback_pandas, _FALLBACK_TYPE)


def decode(df: DataFrame, names: FieldNames, max_event_bytes: int, fast_path: bool = True) -> DataFrame:
    """:data:`RECORD_SCHEMA` -> :data:`DECODED_SCHEMA` with exactly the Lambda path's results.

    Spark's own functions decode every value they can prove ``events.decode`` accepts with the
    same group key, item id and items (the fast path, see :func:`fast_decode`); every other value
    (poison, other JSON layouts) goes to ``events.decode`` in an
    Arrow UDF, so poison reasons and details are the Lambda path's own. ``fast_path=False``
    decodes everything in Python."""
    fields = RECORD_SCHEMA.fieldNames()
    schema = fast_schema(names)
    if fast_path and schema is not None:
        fast = fast_decode(F.col("value"), schema, max_event_bytes)
    else:
        fast = not_proven()
    staged = df.select(*fields, fast.alias("_fast"))
    ok = F.col("_fast.ok")
    slow = _fallback(names, max_event_bytes)(F.when(~ok, F.coalesce(F.col("value"), F.lit(b""))))
    staged = staged.select(*fields, "_fast", slow.alias("_slow"))
    poison = ~ok & (F.col("_slow.group_key") == POISON_GROUP)
    return staged.select(
        *fields[:-1],
        F.when(poison, F.col("value")).alias("value"),
        F.when(ok, F.col("_fast.group_key")).otherwise(F.col("_slow.group_key")).alias("group_key"),
        *(F.when(ok, F.col(f"_fast.{n}")).otherwise(F.col(f"_slow.{n}")).alias(n) for n in ("item_id", "items")),
        F.col("_slow.poison_reason").alias("poison_reason"),
        F.col("_slow.poison_detail").alias("poison_detail"),
    )
