"""Random event-shape specs and random histories of events they read: shared by the
cross-engine tests (the Spark replay in ``tests/spark/test_cross_engine_shape.py``, the streaming
step in ``tests/integration/test_buffer_rules_shape.py``)."""

from __future__ import annotations

import json
import random

import orjson

from consolidator.rules.events import KafkaRecord
from consolidator.rules.shape import OPERATIONS, Shape, parse_outputs, parse_payload

PATHS = {"count": [None, "amount", "props.page"], "sum": ["amount", "price", "props.n"],
         "min": ["amount", "price"], "max": ["price", "props.n"], "first": ["props.page", "props", "tags"],
         "last": ["amount", "props"], "distinct": ["props.page", "amount", "tags"], "group_sum": ["lines"]}


def random_shape(rng: random.Random) -> Shape:
    """A valid spec: a random subset of the operations over paths :func:`random_history` writes
    (or leaves out, or writes with a wrong type), and a random member payload."""
    entries = []
    for index, op in enumerate(rng.sample(OPERATIONS, rng.randrange(1, len(OPERATIONS) + 1))):
        entry = {"name": f"out_{index}", "op": op}
        path = rng.choice(PATHS[op])
        if path is not None:
            entry["path"] = path
        if op == "group_sum":
            entry |= {"by": "code", "sum": ["n"]}
        entries.append(entry)
    full, paths = parse_payload(rng.choice(["none", "full", '["props"]', '["user", "props.page", "lines", "tags"]']))
    return Shape(parse_outputs(json.dumps(entries)), full, paths)


def random_history(rng: random.Random, start: int, count: int = 150) -> list[KafkaRecord]:
    """``count`` records from ``start`` on 2 partitions: repeated users (coalescing), integers and doubles,
    absent values, a wrong-typed value now and then (poison), re-delivered positions."""
    offsets, last, records, at = {0: 0, 1: 0}, {0: 0, 1: 0}, [], start
    for _ in range(count):
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
