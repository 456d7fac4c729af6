"""JVM fast-path decode: exactly ``events.decode``'s results, on poison and on near-valid values,
in both jobs (the streaming job's records also land in their group's shard, as Spark hashes it)."""

from __future__ import annotations

import json
import random

import pytest

from consolidator.rules.events import FieldNames, KafkaRecord, PoisonEvent, decode

pytestmark = pytest.mark.spark

NAMES = FieldNames()
MAX_BYTES = 4096
SCHEMA = "topic string, partition int, offset long, timestamp long, key binary, value binary"

CANONICAL = [
    b'{"location_id":"WH-1","order_id":"A","items":[{"sku":"S","quantity":2}]}',
    b'{"location_id":"WH-1","order_id":"B","items":[]}',
    b'{"location_id":"WH-1","order_id":"C"}',
    '{"location_id":"Entrepôt 7","order_id":"Ω-9","items":[{"sku":"ß😀","quantity":0},{"sku":"T","quantity":9}]}'
    .encode(),
    json.dumps({"location_id": "W" * 191, "order_id": "é" * 191}, ensure_ascii=False, separators=(",", ":")).encode(),
    # JSON punctuation inside strings, DEL, the largest quantity the fast path reads at MAX_BYTES
    # (16 digits: no list of items a 4 KiB value holds can sum past int64)
    (b'{"location_id":"W[{1}]:,","order_id":"A]}","items":[{"sku":"a}1]","quantity":9999999999999999},'
     b'{"sku":"{\x7f,","quantity":0}]}'),
    b'{"location_id":"W","order_id":"A","items":[{"sku":"a},{b","quantity":1},{"sku":"c","quantity":2}]}',
]

POISON = [
    None, b"", b"\xff\xfe{}", b"{not json", b'{"location_id": NaN, "order_id": "A"}',
    b'{"location_id": "W\\ud800", "order_id": "A"}', b"[" * 5000 + b"]" * 5000,
    b'{"location_id":"W","order_id":"A","z":' + b"[" * 5000 + b"]" * 5000 + b"}",
    b"[1, 2]", b'"text"', b'{"order_id": "A"}', b'{"location_id": "", "order_id": "A"}',
    b'{"location_id": "W"}', b'{"location_id":"W","order_id":""}', b'{"location_id": {"a": 1}, "order_id": "A"}',
    b'{"location_id": true, "order_id": "A"}', b'{"location_id":"W","order_id":[1]}',
    json.dumps({"location_id": "W" * 192, "order_id": "A"}, separators=(",", ":")).encode(),
    b'{"location_id":"W","order_id":"A","items":{"sku":"S"}}', b'{"location_id":"W","order_id":"A","items":[3]}',
    b'{"location_id":"W","order_id":"A","items":[null]}', b'{"location_id":"W","order_id":"A","items":[{"quantity":1}]}',
    b'{"location_id":"W","order_id":"A","items":[{"sku":"","quantity":1}]}',
    b'{"location_id":"W","order_id":"A","items":[{"sku":"S","quantity":-1}]}',
    b'{"location_id":"W","order_id":"A","items":[{"sku":"S","quantity":1.5}]}',
    b'{"location_id":"W","order_id":"A","items":[{"sku":"S","quantity":"2"}]}',
    b'{"location_id":"W","order_id":"A","items":[{"sku":"S","quantity":true}]}',
    b'{"location_id":"W","order_id":"A","items":[{"sku":"S","quantity":100000000000000000000}]}',
    b'{"location_id":"W","order_id":"A","items":[{"sku":"S","quantity":1}]}trailing',
    b"{'location_id':'W','order_id':'A'}", b'\xef\xbb\xbf{"location_id":"W","order_id":"A"}',
    b'{"location_id":"W\xed\xa0\x80","order_id":"A"}', b'{"location_id":"W\xc0\x80","order_id":"A"}',
    b'{"location_id":"W","order_id":"A","pad":"' + b"x" * MAX_BYTES + b'"}',
    b'{"location_id":"W","order_id":"A","items":[{"sku":"S","quantity":01}]}',
    b'{"location_id":"W\tX","order_id":"A"}', b'{"location_id":"W","order_id":"A"}}',
    # lists of well-formed items that are not JSON lists
    *(b'{"location_id":"W","order_id":"A","items":[' + listed + b"]}" for listed in (
        b'{"sku":"S","quantity":1},,{"sku":"T","quantity":2}', b',{"sku":"S","quantity":1}',
        b'{"sku":"S","quantity":1},', b'{"sku":"S","quantity":1}{"sku":"T","quantity":2}', b",")),
]

# Valid for events.decode but not in the fast path's layout: decoded in Python, same results.
UNUSUAL = [
    b'{"location_id":"W","location_id":"V","order_id":"A"}', b'{"location_id":-0,"order_id":"A"}',
    b'{"location_id":"W","order_id":17}', b'{"order_id":"A","location_id":"W"}',
    b'{"location_id": "W", "order_id": "A", "items": [{"sku": "S", "quantity": 1}]}',
    b'{"location_id":"W\\u00e9","order_id":"A"}', b'{"location_id":"W","order_id":"A","items":null}',
    b'{"location_id":"W","order_id":"A","note":"x"}', b'{"location_id":"W","order_id":"A"}\n',
    b'{"location_id":"W","order_id":"A","items":[{"quantity":1,"sku":"S"}]}',
    b'{"location_id":"W","order_id":"A","items":[{"sku":"S","quantity":1,"sku":"T"}]}',
    b'{"location_id":"W","order_id":"A","items":[{"sku":"S","quantity":1,"price":2}]}',
    b'{"LOCATION_ID":"X","location_id":"W","order_id":"A"}',
    b'{"location_id":"W","order_id":"A","items":[{"sku":"S","quantity":1000000000000000000}]}',
    b'{"location_id":"W","order_id":"A","items":[{"sku":"S","quantity":10000000000000000}]}',  # 17 digits
    b'{"location_id":"W","order_id":"A","items":[{"sku":"S","quantity":-0}]}',
    # a second list after the items
    b'{"location_id":"W","order_id":"A","items":[{"sku":"S","quantity":1}],"x":[{"sku":"T","quantity":2}]}',
]


def expected(value: bytes | None) -> tuple:
    """What the Lambda path makes of ``value``: (group, item id, items JSON, reason, detail)."""
    try:
        event = decode(KafkaRecord("t", 0, 0, 0, None, value), NAMES, MAX_BYTES)
    except PoisonEvent as poison:
        return ("", None, None, str(poison.reason), poison.detail)
    return (event.group_key, event.item_id, json.dumps(event.items, separators=(",", ":"), ensure_ascii=False),
            None, None)


def near_valid(rng: random.Random) -> bytes:
    """A canonical value with one or two small corruptions (bytes, tokens, layout)."""
    value = rng.choice(CANONICAL)
    for _ in range(rng.choice((1, 1, 2))):
        kind = rng.randrange(8)
        at = rng.randrange(len(value) + 1)
        if kind == 0:  # delete a byte
            value = value[:at] + value[at + 1:]
        elif kind == 1:  # insert a syntax byte
            value = value[:at] + bytes([rng.choice(b' \n"\\,:[]{}-0.e\x00\x7f')]) + value[at:]
        elif kind == 2:  # replace a byte with anything
            value = value[:at] + bytes([rng.randrange(256)]) + value[at + 1:]
        elif kind == 3:  # swap a token for another of a different type
            old, new = rng.choice([(b'"S"', b"5"), (b"2", b"-2"), (b"2", b"2.0"), (b"2", b'"2"'), (b'"A"', b"7"),
                                   (b'"A"', b"-0"), (b'"WH-1"', b"null"), (b'"WH-1"', b'""'), (b"[]", b"null"),
                                   (b"2", b"99999999999999999999"), (b'"A"', b"true"), (b":", b" : ")])
            value = value.replace(old, new, 1)
        elif kind == 4:  # duplicate a member
            value = value.replace(b'"order_id":"A"', b'"order_id":"A","order_id":"Z"', 1)
        elif kind == 5:  # escape a character
            value = value.replace(b"W", b"\\u0057", 1)
        elif kind == 6:  # rename a key
            value = value.replace(rng.choice([b'"sku"', b'"quantity"', b'"items"', b'"order_id"']), b'"x"', 1)
        else:  # trailing or leading bytes
            value = rng.choice([b" ", b"", b"\xef\xbb\xbf"]) + value + rng.choice([b"", b" ", b"}", b"x"])
    return value


def run_decode(spark, values, fast_path=True):
    from consolidator.spark.transforms import decode as spark_decode
    from consolidator.spark.transforms import records

    frame = records(spark.createDataFrame([("t", 0, i, 0, None, v) for i, v in enumerate(values)], SCHEMA))
    rows = spark_decode(frame, NAMES, MAX_BYTES, fast_path=fast_path).orderBy("offset").collect()
    return [(r["group_key"], r["item_id"], r["items"], r["poison_reason"], r["poison_detail"]) for r in rows], [
        r["value"] for r in rows]


def run_packed(spark, values, shards: int = 7):
    """The streaming job's decode (JVM fast path, ``events.decode`` in ``pack``): results as
    :func:`run_decode`'s, after checking each record's shard against Spark's own hash."""
    from pyspark.sql import functions as F

    from consolidator.spark.packing import unpack
    from consolidator.spark.shards import POISON_SHARD
    from consolidator.spark.streaming import packed_records
    from consolidator.spark.transforms import records

    frame = records(spark.createDataFrame([("t", 0, i, 0, None, v) for i, v in enumerate(values)], SCHEMA))
    placed = {}
    for row in packed_records(frame, NAMES, MAX_BYTES, shards).collect():
        for record in unpack([row["records"]]).to_pylist():
            placed[record["offset"]] = (row["shard"], record)
    groups = sorted({r["group_key"] for _, r in placed.values() if r["group_key"]})
    spark_shard = {r["g"]: r["s"] for r in spark.createDataFrame([(g,) for g in groups], "g string").select(
        "g", F.pmod(F.xxhash64("g"), F.lit(shards)).alias("s")).collect()}
    for shard, record in placed.values():
        assert shard == (spark_shard[record["group_key"]] if record["group_key"] else POISON_SHARD), record
    rows = [placed[i][1] for i in range(len(values))]
    return [(r["group_key"], r["item_id"], r["items"], r["poison_reason"], r["poison_detail"]) for r in rows], [
        r["value"] for r in rows]


@pytest.fixture(params=["replay", "streaming"])
def decoded(request):
    """Either job's decode: ``transforms.decode`` (replay) or ``streaming.packed_records``."""
    return run_decode if request.param == "replay" else run_packed


def proven(spark, values) -> list[bool]:
    from consolidator.spark.transforms import fast_decode, fast_schema

    frame = spark.createDataFrame([(v,) for v in values], "value binary")
    return [r["f"]["ok"] for r in frame.select(
        fast_decode(frame["value"], fast_schema(NAMES), MAX_BYTES).alias("f")).collect()]


def test_poison_and_unusual_values_get_the_lambda_paths_results(spark, decoded):
    values = CANONICAL + POISON + UNUSUAL
    got, kept = decoded(spark, values)
    assert got == [expected(v) for v in values]
    assert kept == [v if expected(v)[3] else None for v in values]  # poison keeps its bytes
    assert proven(spark, values) == [True] * len(CANONICAL) + [False] * (len(POISON) + len(UNUSUAL))


def test_values_that_all_take_the_fast_path_decode_alone(spark, decoded):
    got, kept = decoded(spark, CANONICAL)
    assert got == [expected(v) for v in CANONICAL] and kept == [None] * len(CANONICAL)


def test_near_valid_values_decode_exactly_as_events_decode(spark, decoded):
    rng = random.Random(14)
    values = [near_valid(rng) for _ in range(3000)]
    got, _ = decoded(spark, values)
    wrong = [(v, g, expected(v)) for v, g in zip(values, got, strict=True) if g != expected(v)]
    assert not wrong, wrong[:5]
    ok = proven(spark, values)
    # both paths are exercised: the corruptions keep some values valid and canonical
    assert 100 < sum(ok) < len(values) - 100
    assert all(expected(v)[3] is None for v, o in zip(values, ok, strict=True) if o)


def test_python_only_decode_agrees(spark):
    values = CANONICAL + POISON[:6]
    assert run_decode(spark, values, fast_path=False)[0] == [expected(v) for v in values]


def test_a_long_items_list_is_proven_without_overflowing_the_stack(spark):
    """Java's regex engine recurses once per repetition of a group: one expression over a list of
    thousands of items overflowed the executor's stack and failed the whole job."""
    from consolidator.spark.transforms import fast_decode, fast_schema

    items = [{"sku": f"S{i}", "quantity": i} for i in range(5000)]
    value = json.dumps({"location_id": "W", "order_id": "A", "items": items}, separators=(",", ":")).encode()
    frame = spark.createDataFrame([(value,)], "value binary")
    got = frame.select(fast_decode(frame["value"], fast_schema(NAMES), 1 << 20).alias("f")).first()["f"]
    event = decode(KafkaRecord("t", 0, 0, 0, None, value), NAMES, 1 << 20)
    assert got["ok"] and json.loads(got["items"]) == [list(i) for i in event.items]
    assert (got["group_key"], got["item_id"]) == (event.group_key, event.item_id)


# Within int64 each, over it together (10 items of 10**18 - 1 for one sku), or over it alone.
OVER_INT64 = [
    b'{"location_id":"W","order_id":"A","items":[' + b",".join([b'{"sku":"S","quantity":999999999999999999}'] * 10)
    + b"]}",
    b'{"location_id":"W","order_id":"A","items":[{"sku":"S","quantity":9223372036854775808}]}',
    b'{"location_id":"W","order_id":"A","items":[{"sku":"T","quantity":1},{"sku":"S","quantity":18446744073709551615}]}',
]


def test_quantities_and_sums_beyond_int64_are_poison_on_both_engines(spark, decoded):
    """Java consumers read quantities as longs: the fast path never accepts what could overflow
    one, and the Python decode it hands them to names the item that goes over."""
    got, kept = decoded(spark, OVER_INT64)
    paths = ["items[9].quantity", "items[0].quantity", "items[1].quantity"]
    for (group, _, _, reason, detail), path in zip(got, paths, strict=True):
        assert (group, reason) == ("", "bad_quantity") and path in detail and "2**63-1" in detail, detail
    assert got == [expected(v) for v in OVER_INT64] and kept == OVER_INT64
    assert proven(spark, OVER_INT64) == [False] * len(OVER_INT64)


def test_the_fast_path_reads_fewer_digits_where_more_items_fit():
    from consolidator.rules.events import MAX_QUANTITY
    from consolidator.spark.transforms import fast_schema, quantity_digits

    for max_bytes in (100, 4096, 262_144, 1 << 20, 100_000_000):
        digits = quantity_digits(fast_schema(NAMES), max_bytes)
        most_items = max_bytes // len('{"sku":"s","quantity":0},')
        assert (10**digits - 1) * most_items <= MAX_QUANTITY  # every sum of a value this size fits
        assert digits == 18 or (10 ** (digits + 1) - 1) * most_items > MAX_QUANTITY  # and no digit more
