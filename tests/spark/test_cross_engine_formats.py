"""Avro input on both engines: the serverless path (ingest decoding with the registry, flush on
MariaDB) and the Spark replay (the same decoder in Python workers) give identical batches and
the same poison reasons, across two schema versions of the events."""

from __future__ import annotations

import json

import pytest
from format_values import ORDER_V2, avro_body, avro_serializer, confluent
from schema_registry import LocalSchemaRegistry
from test_cross_engine import POLICY, history, serverless

from consolidator.rules.events import KafkaRecord
from consolidator.sources.formats import ValueFormat

pytestmark = pytest.mark.spark


@pytest.fixture
def registry():
    r = LocalSchemaRegistry()
    yield r
    r.stop()


def avro_history(registry: LocalSchemaRegistry) -> list[KafkaRecord]:
    """The JSON history with every event in Avro (every third one written with schema version 2,
    which adds a field), the JSON poison left as it is (not the wire format), and two Avro poison
    records: an unknown schema id and a value cut short."""
    v1, v2 = avro_serializer(registry.url), avro_serializer(registry.url, ORDER_V2)
    records, converted = [], {}
    for n, r in enumerate(history(seed=3)):
        if r.position in converted:  # a re-delivered position: the same bytes again
            records.append(r._replace(value=converted[r.position]))
            continue
        try:
            document = json.loads(r.value)
        except ValueError:
            document = None
        if isinstance(document, dict) and "location_id" in document:
            value = v2({**document, "channel": "app"}) if n % 3 == 0 else v1(document)
            if n == 40:
                value = confluent(999, avro_body(document))
            elif n == 41:
                value = value[:-2]
        else:
            value = r.value
        converted[r.position] = value
        records.append(r._replace(value=value))
    return records


def test_avro_input_gives_identical_batches_and_poison_on_both_engines(spark, registry, store, tmp_path):
    from consolidator.spark.replay import NamedPolicy, replay
    from consolidator.spark.transforms import records as to_records

    records = avro_history(registry)
    values = ValueFormat("avro", registry.url)
    lambda_batches, lambda_dead = serverless(records, store, tmp_path, values=values.decoder())

    frame = to_records(spark.createDataFrame(
        [(r.topic, r.partition, r.offset, r.timestamp_ms, r.key, r.value) for r in records],
        "topic string, partition int, offset long, timestamp long, key binary, value binary"))
    result = replay(frame, [NamedPolicy("same", POLICY)], values=values).collect()
    spark_batches = {m["batch_id"]: m for m in (json.loads(r["body"]) for r in result if r["kind"] == "batch")}
    spark_dead = [json.loads(r["body"]) for r in result if r["kind"] == "dead_letter"]

    assert lambda_batches and spark_batches == {m["batch_id"]: m for m in lambda_batches}
    assert sum(len(m["members"]) for m in spark_batches.values()) > len(records) // 2

    def poison(entries: list[dict]) -> list[tuple]:
        return sorted((e["reason"], e["source"]["partition"], e["source"]["offset"]) for e in entries)

    reasons = {reason for reason, *_ in poison(spark_dead)}
    assert any(r.value[1:5] == (2).to_bytes(4, "big") for r in records)  # schema version 2 is in the input
    assert {"unknown_schema", "undecodable_value", "bad_wire_format"} <= reasons
    # as sets: a re-delivered poison position is dead-lettered once per copy by the replay
    assert sorted(set(poison(spark_dead))) == sorted(set(poison(lambda_dead)))



def test_the_stream_decodes_avro_records_as_the_lambda_path_does(spark, registry):
    """The streaming job's decode step (``packed_records``: every registry-format value decoded in
    the Python workers) gives each record the Lambda path's group key, item id, items or poison."""
    from consolidator.rules.events import FieldNames, PoisonEvent
    from consolidator.sources.formats import decode_event
    from consolidator.spark.packing import POISON_GROUP, unpack
    from consolidator.spark.streaming import packed_records
    from consolidator.spark.transforms import records as to_records

    records = avro_history(registry)
    values = ValueFormat("avro", registry.url)
    frame = to_records(spark.createDataFrame(
        [(r.topic, r.partition, r.offset, r.timestamp_ms, r.key, r.value) for r in records],
        "topic string, partition int, offset long, timestamp long, key binary, value binary"))
    packed = packed_records(frame, FieldNames(), 262_144, 4, values).collect()
    rows = unpack([row["records"] for row in packed]).to_pylist()
    stream = {(r["partition"], r["offset"]): (r["group_key"], r["item_id"], r["items"] and json.loads(r["items"]),
                                              r["poison_reason"]) for r in rows}

    decoder, expected = values.decoder(), {}
    for r in records:
        try:
            event = decode_event(decoder, r, FieldNames(), 262_144)
        except PoisonEvent as poison:
            expected[(r.partition, r.offset)] = (POISON_GROUP, None, None, str(poison.reason))
            continue
        expected[(r.partition, r.offset)] = (event.group_key, event.item_id, [list(i) for i in event.items], None)
    assert stream == expected
    assert sum(v[0] == POISON_GROUP for v in stream.values()) >= 3
