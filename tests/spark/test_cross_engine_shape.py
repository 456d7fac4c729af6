"""Any event shape, two engines: random aggregation specs and member payloads over random
histories give identical batches (same ids, same bytes) on the serverless path (real ingest and
flush services on MariaDB) and in the Spark replay."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
from random_shapes import random_history, random_shape
from test_cross_engine import START, serverless

from consolidator.rules.events import FieldNames, KafkaRecord
from consolidator.rules.policy import Policy, RateLimit

pytestmark = pytest.mark.spark

@pytest.mark.parametrize(("seed", "plain"), [(1, False), (2, False), (3, False), (4, False), (5, False),
                                             (6, False), (7, True), (8, True)])
def test_random_shapes_and_histories_give_identical_batches_on_both_engines(spark, store, tmp_path, seed, plain):
    """``plain``: no rate limit, TTL or byte cap, so that the replay simulates the groups columnar
    (``spark/columnar_shape.py``) but for those it hands back."""
    from consolidator.spark.columnar_shape import is_plain_shaped
    from consolidator.spark.replay import NamedPolicy, replay
    from consolidator.spark.transforms import records as to_records

    rng = random.Random(seed)
    shape = random_shape(rng)
    names = FieldNames(group_key="tenant", item_id="user", shape=shape)
    policy = Policy(debounce_ms=60_000, hard_window_ms=300_000, max_batch_size=rng.choice([3, 6, 50]),
                    tick_interval_ms=30_000, max_batch_bytes=rng.choice([None, 2500]),
                    rate_limit=rng.choice([None, RateLimit(1, 180_000)]), ttl_ms=rng.choice([0, 60_000]))
    if plain:
        policy = dataclasses.replace(policy, max_batch_bytes=None, rate_limit=None, ttl_ms=0)
        assert is_plain_shaped(policy, names)
    records = random_history(rng, START)
    lambda_batches, lambda_dead = serverless(records, store, tmp_path, policy, names)
    lambda_bodies = sorted((tmp_path / "serverless-batches.jsonl").read_bytes().splitlines())

    frame = to_records(spark.createDataFrame(
        [(r.topic, r.partition, r.offset, r.timestamp_ms, r.key, r.value) for r in records],
        "topic string, partition int, offset long, timestamp long, key binary, value binary"))
    result = replay(frame, [NamedPolicy("shaped", policy)], names).collect()
    spark_bodies = sorted(r["body"].encode() for r in result if r["kind"] == "batch")
    spark_dead = [json.loads(r["body"]) for r in result if r["kind"] == "dead_letter"]
    spark_expired = [json.loads(r["body"]) for r in result if r["kind"] == "expired"]

    assert lambda_bodies and len(lambda_bodies) == len({m["batch_id"] for m in lambda_batches})
    assert spark_bodies == lambda_bodies  # same ids, same bytes
    assert all(b["schema_version"] == 2 for b in lambda_batches)

    def poison(entries: list[dict]) -> list[tuple]:
        return sorted({(e["reason"], e.get("detail"), e["source"]["partition"], e["source"]["offset"])
                       for e in entries if e["reason"] != "expired"})

    assert poison(spark_dead) == poison(lambda_dead)
    lambda_expired = [e for e in lambda_dead if e["reason"] == "expired"]
    assert sorted(spark_expired, key=json.dumps) == sorted(lambda_expired, key=json.dumps)


@pytest.mark.parametrize("plain", [False, True])
def test_the_numbers_examples_and_edge_numbers_give_identical_batches_on_both_engines(spark, store, tmp_path, plain):
    """Every example of docs/guide/events.md, "Numbers" (``numbers_doc`` reads the table), each in its
    own group, and random edge numbers as literals: the serverless path and the Spark replay (the
    columnar simulation where ``plain``) give the same bytes and the same poison, and each
    example's totals are the page's."""
    from numbers_doc import NAMES, examples, totals

    from consolidator.spark.replay import NamedPolicy, replay
    from consolidator.spark.transforms import records as to_records

    records, offset = [], 0
    for index, example in enumerate(examples()):
        records += example.records(f"N{index}", first_offset=offset, timestamp_ms=START + index)
        offset += len(example.literals)
    rng = random.Random(7)
    edges = ["5e-324", "-0.0", "1.7976931348623157e308", "-1.7e308", "9007199254740993", "9223372036854775807",
             "-9223372036854775808", "-9223372036854775809", "100000000000000000000", "0.1", "1e20", "7"]
    for i in range(60):
        records.append(KafkaRecord("events", 1, i, START + 1_000 * i, b"E", b'{"tenant": "E%d", "user": "u%d", "v": %b}'
                                   % (i % 3, rng.randrange(8), rng.choice(edges).encode())))
    policy = Policy(debounce_ms=60_000, hard_window_ms=300_000, max_batch_size=4, tick_interval_ms=30_000,
                    max_batch_bytes=None if plain else 2500)
    _, lambda_dead = serverless(records, store, tmp_path, policy, NAMES)
    lambda_bodies = sorted((tmp_path / "serverless-batches.jsonl").read_bytes().splitlines())

    frame = to_records(spark.createDataFrame(
        [(r.topic, r.partition, r.offset, r.timestamp_ms, r.key, r.value) for r in records],
        "topic string, partition int, offset long, timestamp long, key binary, value binary"))
    result = replay(frame, [NamedPolicy("numbers", policy)], NAMES).collect()
    assert sorted(r["body"].encode() for r in result if r["kind"] == "batch") == lambda_bodies
    spark_dead = [json.loads(r["body"]) for r in result if r["kind"] == "dead_letter"]
    assert sorted((e["reason"], e["source"]["partition"], e["source"]["offset"]) for e in spark_dead) == sorted(
        (e["reason"], e["source"]["partition"], e["source"]["offset"]) for e in lambda_dead)

    for index, example in enumerate(examples()):
        bodies = sorted((b for b in lambda_bodies if json.loads(b)["group_key"] == f"N{index}"),
                        key=lambda b: json.loads(b)["members"][0]["offset"])
        assert totals(bodies) == example.totals, example
