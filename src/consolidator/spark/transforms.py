"""DataFrame transforms shared by the streaming and the replay job.

Every source (Spark's ``kafka`` format, the confluent-kafka Python data source, JSON lines,
Parquet) is first brought to :data:`RECORD_SCHEMA` by :func:`records`; :func:`decode` then
decodes in the JVM what it can prove valid and hands the rest to :func:`consolidator.rules.events.decode`,
so results (group keys, items, poison reasons) are exactly the Lambda path's. Values in a
registry format (:mod:`consolidator.sources.formats`) are all decoded in Python, by the Lambda path's
own :func:`consolidator.sources.formats.decode_event`.
"""

from __future__ import annotations

import json
import re

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from consolidator.rules.events import (
    MAX_KEY_CHARS,
    MAX_QUANTITY,
    FieldNames,
    KafkaRecord,
    PoisonEvent,
)
from consolidator.rules.shape import EventView, stored_text
from consolidator.sources.formats import ValueFormat, decode_event
from consolidator.spark.shards import POISON_GROUP

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
#: Deferred (``decode(defer=True)``): the claimed group key, ``value`` kept, ``item_id`` and
#: ``items`` null, decoded after the shuffle (:mod:`consolidator.spark.deferred`).
DECODED_SCHEMA = T.StructType([
    *RECORD_SCHEMA.fields,
    T.StructField("group_key", T.StringType(), False),
    T.StructField("item_id", T.StringType(), True),
    T.StructField("items", T.StringType(), True),  # JSON [[sku, quantity], ...], or {"event": ...} (shape.stored_text)
    T.StructField("poison_reason", T.StringType(), True),
    T.StructField("poison_detail", T.StringType(), True),
    T.StructField("event_time_ms", T.LongType(), True),  # with an event time field: the event's own time
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


def read_record_stream(spark: SparkSession, path: str, fmt: str = "json") -> DataFrame:
    """The same records as :func:`read_record_files`, as a file stream: Spark's file source picks
    up each new file in ``path`` once (files must appear whole: write elsewhere, then move them
    in). A Parquet stream takes its schema from the files already there, so it needs one."""
    if fmt == "json":
        return records(spark.readStream.schema(JSON_INPUT_SCHEMA).json(path))
    if fmt == "parquet":
        from pyspark.errors import AnalysisException

        try:
            schema = spark.read.parquet(path).schema
        except AnalysisException as exc:  # no file yet, or not Parquet
            raise ValueError(f"cannot take a Parquet schema from {path}: put one file of records there "
                             f"first ({str(exc).splitlines()[0]})") from exc
        return records(spark.readStream.schema(schema).parquet(path))
    raise ValueError(f"unsupported input format {fmt!r}: use json or parquet")


# -- decode: a JVM fast path that hands everything it cannot prove valid to events.decode ------


def fast_schema(names: FieldNames) -> T.StructType | None:
    """The fields the fast path reads, in the order it expects them (None: names collide, one
    needs an escape in JSON, or a generic event shape is configured: it keeps what it reads of
    each event, which only ``events.decode`` knows)."""
    fields = (names.group_key, names.item_id, names.items, names.sku, names.quantity)
    if not names.shape.is_reference or names.event_time is not None or len(set(fields[:3])) < 3 or names.sku == names.quantity or any(_JSON_ESCAPED.search(f) for f in fields):
        return None
    item = T.StructType([T.StructField(names.sku, T.StringType()), T.StructField(names.quantity, T.LongType())])
    return T.StructType([T.StructField(names.group_key, T.StringType()),
                         T.StructField(names.item_id, T.StringType()),
                         T.StructField(names.items, T.ArrayType(item))])


_JSON_ESCAPED = re.compile(r'["\\\x00-\x1f]')  # what a JSON string cannot hold unescaped
_TEXT = r'[^"\\\x00-\x1f]+'  # a non-empty JSON string's contents without escapes (Java regex)
_MARK = "\x01"


def quantity_digits(schema: T.StructType, max_event_bytes: int) -> int:
    """The most digits the fast path reads in a quantity: so many that any list of items a value
    of ``max_event_bytes`` can hold sums to at most ``MAX_QUANTITY`` (no sku's sum in the event
    can then go over int64). A larger quantity goes to ``events.decode``, which checks the sums."""
    items = schema.fields[2].name
    sku, quantity = (f.name for f in schema[items].dataType.elementType.fields)
    shortest_entry = len(f'{{"{sku}":"s","{quantity}":0}},')
    most_items = max(1, max_event_bytes // shortest_entry)
    digits = 0
    while digits < 18 and (10 ** (digits + 1) - 1) * most_items <= MAX_QUANTITY:
        digits += 1
    return digits


def fast_decode(value: Column, schema: T.StructType, max_event_bytes: int) -> Column:
    """struct<ok, group_key, item_id, items>, ``ok`` only where ``events.decode`` provably gives
    this group key, item id and items; elsewhere the three are meaningless (text cut from the value).

    The proof: the value is valid UTF-8 and matches, as a whole, the compact layout
    ``{"<group>":"g","<item>":"i"}`` or ``{"<group>":"g","<item>":"i","<items>":[e,...]}`` with
    each ``e`` ``{"<sku>":"s","<quantity>":n}``: strings without escapes or control characters,
    ``n`` an integer of at most :func:`quantity_digits` digits (so the event's sums fit int64),
    without sign, fraction or exponent. Such a value is
    JSON with just these fields, nothing duplicated and nothing after the object, which orjson
    and msgspec read to these values. Identifier lengths are checked as ``events.decode`` checks
    them (1 to :data:`MAX_KEY_CHARS` code points); a sku is never empty. Any other value (poison,
    other layouts, escapes, extra fields) is not proven and goes to Python."""
    group, item, items = (f.name for f in schema.fields)
    sku, quantity = (f.name for f in schema[items].dataType.elementType.fields)

    def key(name: str) -> str:
        return rf'"\Q{name}\E":'

    # Never one regular expression over the whole list: Java's regex engine recurses once per
    # repetition of a group, and a list of a thousand items overflowed the executor's stack.
    layout = (rf'\A\{{{key(group)}"{_TEXT}",{key(item)}"{_TEXT}"'
              rf'(?:,{key(items)}\[[^\x00-\x1f]*\])?\}}\z')
    digits = quantity_digits(schema, max_event_bytes)
    number = "0" if digits < 1 else rf"(?:0|[1-9][0-9]{{0,{digits - 1}}})"  # as JSON writes it
    entry = rf'\{{{key(sku)}"{_TEXT}",{key(quantity)}{number}\}}'
    text = value.cast("string")
    layout_ok = (F.octet_length(value) <= max_event_bytes) & text.rlike(layout) & F.is_valid_utf8(value)
    # ids hold no '"': the group key is between the 3rd and 4th quote, the item id the 7th and 8th
    group_key = F.substring_index(F.substring_index(text, '"', 4), '"', -1)
    item_id = F.substring_index(F.substring_index(text, '"', 8), '"', -1)
    head = F.char_length(group_key) + F.char_length(item_id) + len(f'{{"{group}":"","{item}":""')
    start = head + len(f',"{items}":')
    listed = text.substr(start + 1, F.char_length(text) - start - 1)  # [e,...] without the closing brace
    # Each item replaced by a mark (a control character: none is left in a matching value); the
    # list is then "[", marks and commas alternating from a mark to a mark, "]"
    marked = F.regexp_replace(listed, entry, _MARK)
    items_ok = ((F.char_length(text) == head + 1) | (listed == "[]")
                | (marked.rlike(rf"\A\[{_MARK}[,{_MARK}]*\]\z") & (F.instr(marked, ",,") == 0)
                   & (F.instr(marked, _MARK * 2) == 0) & ~F.endswith(marked, F.lit(",]"))))
    as_json = F.regexp_replace(listed, rf'\{{{key(sku)}"([^"]*)",{key(quantity)}([0-9]+)\}}', '["$1",$2]')
    ids_fit = (F.char_length(group_key) <= MAX_KEY_CHARS) & (F.char_length(item_id) <= MAX_KEY_CHARS)
    # no conditional around the fields: Spark then computes each once for all uses
    return F.struct(F.coalesce(layout_ok & ids_fit & items_ok, F.lit(False)).alias("ok"),
                    group_key.alias("group_key"), item_id.alias("item_id"),
                    F.when(F.char_length(text) > head + 1, as_json).otherwise(F.lit("[]")).alias("items"))


_UNSAFE_NAME = re.compile(r'[\s"\\:,{}\[\]\x00-\x1f]')  # what may stand outside a JSON string, or needs an escape


def deferrable(names: FieldNames, values: ValueFormat | None = None) -> bool:
    """Whether :func:`claimed_group_key` can prove group keys for ``names``: a generic shape, JSON
    values, and a group key field whose name holds no whitespace, quote, backslash, control
    character or any of ``:,{}[]`` (so its quoted name can only be a string token of a JSON text)."""
    return not names.shape.is_reference and names.event_time is None and values is None and bool(names.group_key) \
        and not _UNSAFE_NAME.search(names.group_key)


def claimed_group_key(value: Column, names: FieldNames, max_event_bytes: int) -> Column:
    """struct<ok, group_key>: ``ok`` where ``events.decode`` of ``value`` either is poison or gives
    this group key (:func:`deferrable` names only); the group key is meaningless elsewhere.

    The proof: the value holds no backslash, so every ``"`` of a JSON text delimits a string and
    no string is written with an escape; the quoted field name ``"N"`` occurs exactly once, and
    is followed by ``:`` and a string ``"g"`` (JSON whitespace between): a name without the
    characters :func:`deferrable` excludes cannot start right after a closing quote, so that
    occurrence is the one string token ``N`` of the text, a key of some object, whose value
    is ``g``. If the value is valid JSON, an object, and that object is the top-level one, the
    top-level object has the key once, with the value ``g`` (code points as written:
    ``events.decode`` keeps a string identifier of 1 to :data:`MAX_KEY_CHARS` of them as it
    is); otherwise ``events.decode`` finds poison (the key missing at the top level, not an
    object, not JSON, not UTF-8), whatever the group key. Values that are not proven keep the
    Python decoder before the shuffle."""
    token = f'"{names.group_key}"'
    text = value.cast("string")
    key = F.regexp_extract(text, rf'"\Q{names.group_key}\E"[ \t\n\r]*:[ \t\n\r]*"([^"\x00-\x1f]*)"', 1)
    # byte searches only (instr and char_length count characters: several times slower on 1 KB)
    once = F.octet_length(F.substring_index(text, token, 2)) == F.octet_length(value)  # no 2nd occurrence
    ok = ((F.octet_length(value) <= max_event_bytes) & ~text.contains("\\") & text.contains(token) & once
          & (F.char_length(key) >= 1) & (F.char_length(key) <= MAX_KEY_CHARS))
    return F.struct(F.coalesce(ok, F.lit(False)).alias("ok"), key.alias("group_key"))


def not_proven() -> Column:
    return F.struct(F.lit(False).alias("ok"), *(F.lit(None).cast("string").alias(n)
                                                for n in ("group_key", "item_id", "items")))


_FALLBACK_TYPE = ("group_key string, item_id string, items string, poison_reason string, poison_detail string,"
                  " event_time_ms long")


def decode_value(value: bytes, names: FieldNames, max_event_bytes: int,
                 values: ValueFormat | None = None, topic: str = "") -> dict[str, str]:
    """``events.decode`` of one value of ``topic`` (in ``values``' format, None: JSON; the topic
    names the schema subjects a registry format allows by default) as the decoded columns:
    ``group_key``, ``item_id`` and ``items`` (JSON), or, for poison, :data:`POISON_GROUP` with
    ``poison_reason`` and ``poison_detail``. A registry that cannot answer raises
    :class:`~consolidator.sources.formats.RegistryUnavailable`: the task fails and Spark retries it (a
    dependency failure is never a dead letter)."""
    decoder = None if values is None else values.shared_decoder()
    try:
        event = decode_event(decoder, KafkaRecord(topic, 0, 0, 0, None, value), names, max_event_bytes)
    except PoisonEvent as poison:
        return {"group_key": POISON_GROUP, "poison_reason": str(poison.reason), "poison_detail": poison.detail}
    items = (stored_text(event.items) if isinstance(event.items, EventView)
             else json.dumps(event.items, separators=(",", ":"), ensure_ascii=False))
    return {"group_key": event.group_key, "item_id": event.item_id, "items": items,
            "event_time_ms": None if names.event_time is None else event.timestamp_ms}


def _fallback(names: FieldNames, max_event_bytes: int, values: ValueFormat | None = None):
    """Arrow UDF of (value, topic): ``events.decode`` on the non-null values (the records the
    fast path left); nulls elsewhere. Poison gets :data:`POISON_GROUP` and its reason and
    detail."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out_type = pa.struct([("group_key", pa.string()), ("item_id", pa.string()), ("items", pa.string()),
                          ("poison_reason", pa.string()), ("poison_detail", pa.string()),
                          ("event_time_ms", pa.int64())])

    def fallback(value: pa.Array, topic: pa.Array) -> pa.Array:
        count = len(value)
        todo = pc.indices_nonzero(pc.is_valid(value)).to_pylist()
        if not todo:
            return pa.nulls(count, out_type)
        rows: list[dict | None] = [None] * count
        if not names.shape.is_reference and values is None and names.event_time is None:  # a generic shape: the common case in one pass
            todo, decoded = _decode_shaped(value, todo, names, max_event_bytes)
            if not todo:
                return decoded
            rows = decoded.to_pylist()
        for index in todo:
            rows[index] = decode_value(value[index].as_py(), names, max_event_bytes, values,
                                       topic[index].as_py() or "")
        return pa.array(rows, out_type)

    fallback.__annotations__ = {"value": pa.Array, "topic": pa.Array, "return": pa.Array}  # resolved here
    if hasattr(F, "arrow_udf"):  # Spark >= 4.1
        return F.arrow_udf(fallback, _FALLBACK_TYPE)
    return _as_pandas_udf(fallback, out_type)


def _decode_shaped(value, todo: list[int], names: FieldNames, max_event_bytes: int):
    """:func:`~consolidator.spark.decode_shape.decode_shaped` of the values at ``todo``: the
    indices it left to ``events.decode``, and the decoded columns (:data:`_FALLBACK_TYPE`,
    null elsewhere)."""
    import pyarrow as pa

    from consolidator.spark.decode_shape import decode_shaped

    count, raw = len(value), value.to_pylist()
    groups, item_ids, items, rest = decode_shaped([raw[i] for i in todo], names, max_event_bytes)
    columns: list[list] = [[None] * count for _ in range(3)]
    for j, index in enumerate(todo):
        columns[0][index], columns[1][index], columns[2][index] = groups[j], item_ids[j], items[j]
    nulls = pa.array([g is None for g in columns[0]])
    decoded = pa.StructArray.from_arrays(
        [pa.array(c, pa.string()) for c in columns] + [pa.nulls(count, pa.string())] * 2 + [pa.nulls(count, pa.int64())],
        names=["group_key", "item_id", "items", "poison_reason", "poison_detail", "event_time_ms"], mask=nulls)
    return [todo[j] for j in rest], decoded


def _as_pandas_udf(fallback, out_type):
    """Spark 4.0 (EMR's emr-spark-8.0.0) has no ``arrow_udf``: the same function as a pandas
    UDF. A null row comes back as a struct of nulls, which ``decode`` reads the same way."""
    import pandas as pd
    import pyarrow as pa

    def fallback_pandas(value: pd.Series, topic: pd.Series) -> pd.DataFrame:
        result = fallback(pa.Array.from_pandas(value, type=pa.binary()), pa.Array.from_pandas(topic, type=pa.string()))
        return pd.DataFrame({field.name: column.to_pandas()
                             for field, column in zip(out_type, result.flatten(), strict=True)})

    fallback_pandas.__annotations__ = {"value": pd.Series, "topic": pd.Series, "return": pd.DataFrame}
    return F.pandas_udf(fallback_pandas, _FALLBACK_TYPE)


def decode(df: DataFrame, names: FieldNames, max_event_bytes: int, fast_path: bool = True,
           values: ValueFormat | None = None, defer: bool = False) -> DataFrame:
    """:data:`RECORD_SCHEMA` -> :data:`DECODED_SCHEMA` with exactly the Lambda path's results.

    Spark's own functions decode every value they can prove ``events.decode`` accepts with the
    same group key, item id and items (the fast path, see :func:`fast_decode`); every other value
    (poison, other JSON layouts) goes to ``events.decode`` in an
    Arrow UDF, so poison reasons and details are the Lambda path's own. ``fast_path=False``
    decodes everything in Python, and so does a registry format (``values``). ``defer`` (a
    generic shape, :func:`deferrable` names): a value whose group key :func:`claimed_group_key`
    proves is left undecoded, for :mod:`consolidator.spark.deferred` after the shuffle."""
    fields = RECORD_SCHEMA.fieldNames()
    schema = fast_schema(names)
    if fast_path and schema is not None and values is None:
        fast = fast_decode(F.col("value"), schema, max_event_bytes)
    else:
        fast = not_proven()
    deferred = defer and fast_path and deferrable(names, values)
    claim = claimed_group_key(F.col("value"), names, max_event_bytes) if deferred else F.struct(
        F.lit(False).alias("ok"), F.lit(None).cast("string").alias("group_key"))
    staged = df.select(*fields, fast.alias("_fast"), claim.alias("_claim"))
    ok, later = F.col("_fast.ok"), F.col("_claim.ok")
    slow_rows = ~ok & ~later
    topic = F.lit(None).cast("string") if values is None else F.when(slow_rows, F.col("topic"))  # a registry's subjects
    slow = _fallback(names, max_event_bytes, values)(F.when(slow_rows, F.coalesce(F.col("value"), F.lit(b""))), topic)
    staged = staged.select(*fields, "_fast", "_claim", slow.alias("_slow"))
    poison = ~ok & ~later & (F.col("_slow.group_key") == POISON_GROUP)
    return staged.select(
        *fields[:-1],
        F.when(poison | later, F.col("value")).alias("value"),
        F.when(ok, F.col("_fast.group_key")).when(later, F.col("_claim.group_key"))
        .otherwise(F.col("_slow.group_key")).alias("group_key"),
        *(F.when(ok, F.col(f"_fast.{n}")).when(~later, F.col(f"_slow.{n}")).alias(n) for n in ("item_id", "items")),
        F.col("_slow.poison_reason").alias("poison_reason"),
        F.col("_slow.poison_detail").alias("poison_detail"),
        F.when(~ok & ~later, F.col("_slow.event_time_ms")).alias("event_time_ms"),
    )
