"""Any event shape, two engines: random aggregation specs and member payloads over random
histories give identical batches (same ids, same bytes) on the serverless path (real ingest and
flush services on MariaDB) and in the Spark replay (issue 22)."""

from __future__ import annotations

import json
import random

import orjson
import pytest
from test_cross_engine import START, serverless

from consolidator.events import FieldNames, KafkaRecord
from consolidator.policy import Policy, RateLimit
from consolidator.shape import OPERATIONS, Shape, parse_outputs, parse_payload

pytestmark = pytest.mark.spark

PATHS = {"count": [None, "amount", "props.page"], "sum": ["amount", "price", "props.n"],
         "min": ["amount", "price"], "max": ["price", "props.n"], "first": ["props.page", "props", "tags"],
         "last": ["amount", "props"], "distinct": ["props.page", "amount", "tags"], "group_sum": ["lines"]}


def random_shape(rng: random.Random) -> Shape:
    entries = []
    for index, op in enumerate(rng.sample(OPERATIONS, rng.randrange(1, len(OPERATIONS) + 1))):
        entry = {"name": f"out_{index}", "op": op}
        path = rng.choice(PATHS[op])
        if path is not None:
            entry["path"] = path
        if op == "group_sum":
            entry |= {"by": "code", "sum": ["n"]}
        entries.append(entry)
    full, paths = parse_payload(rng.choice(["none", "full", '["props"]', '["user", "props.page", "lines"]']))
    return Shape(parse_outputs(json.dumps(entries)), full, paths)


def random_history(rng: random.Random) -> list[KafkaRecord]:
    """~150 records on 2 partitions: repeated users (coalescing), integers and doubles,
    absent values, a wrong-typed value now and then (poison), re-delivered positions."""
    offsets, last, records, at = {0: 0, 1: 0}, {0: 0, 1: 0}, [], START
    for _ in range(150):
        at += rng.choice([0, 1_000, 20_000, 45_000, 70_000])
        partition = rng.randrange(2)
        when = max(at, last[partition])
        tenant = f"T{rng.randrange(3)}"
        event: dict = {"tenant": tenant, "user": rng.choice([f"u{rng.randrange(8)}", rng.randrange(8)])}
        if rng.random() < 0.8:
            event["amount"] = rng.choice([rng.randrange(-50, 1000), 2**40 + rng.randrange(9)])
        if rng.random() < 0.7:
            event["price"] = rng.choice([0.1, 2.5, 1e-3, 3.3333, 1e15, rng.randrange(9)])
        if rng.random() < 0.7:
            event["props"] = {"page": f"/p{rng.randrange(4)}", "n": rng.randrange(100), "x": "y" * rng.randrange(30)}
        if rng.random() < 0.5:
            event["lines"] = [{"code": f"c{rng.randrange(3)}", "n": rng.randrange(5)} for _ in range(rng.randrange(3))]
        event["tags"] = rng.choice(["a", "b", 7, None])
        event["items"] = "an unrelated field"
        if rng.random() < 0.03:
            event[rng.choice(["amount", "price", "lines", "props"])] = rng.choice(["bad", [1], {"a": 1}, True])
        records.append(KafkaRecord("events", partition, offsets[partition], when, tenant.encode(),
                                   orjson.dumps(event)))
        last[partition], offsets[partition] = when, offsets[partition] + 1
        if rng.random() < 0.04:
            records.append(records[rng.randrange(len(records))])
    return records


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_random_shapes_and_histories_give_identical_batches_on_both_engines(spark, store, tmp_path, seed):
    from consolidator.spark.replay import NamedPolicy, replay
    from consolidator.spark.transforms import records as to_records

    rng = random.Random(seed)
    shape = random_shape(rng)
    names = FieldNames(group_key="tenant", item_id="user", shape=shape)
    policy = Policy(debounce_ms=60_000, hard_window_ms=300_000, max_batch_size=rng.choice([3, 6, 50]),
                    tick_interval_ms=30_000, max_batch_bytes=rng.choice([None, 2500]),
                    rate_limit=rng.choice([None, RateLimit(1, 180_000)]), ttl_ms=rng.choice([0, 60_000]), shape=shape)
    records = random_history(rng)
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
