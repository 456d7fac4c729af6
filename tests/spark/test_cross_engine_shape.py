"""Any event shape, two engines: random aggregation specs and member payloads over random
histories give identical batches (same ids, same bytes) on the serverless path (real ingest and
flush services on MariaDB) and in the Spark replay (issue 22)."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
from random_shapes import random_history, random_shape
from test_cross_engine import START, serverless

from consolidator.rules.events import FieldNames
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
                    rate_limit=rng.choice([None, RateLimit(1, 180_000)]), ttl_ms=rng.choice([0, 60_000]), shape=shape)
    if plain:
        policy = dataclasses.replace(policy, max_batch_bytes=None, rate_limit=None, ttl_ms=0)
        assert is_plain_shaped(policy)
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
