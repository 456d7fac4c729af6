"""The replay under a generic shape decodes after the shuffle what the JVM proves the group key
of (``transforms.claimed_group_key``, ``spark/deferred.py``): the claim is ``events.decode``'s
group key or the value is poison, and the replay's outputs are those of decoding every value
before the shuffle (batches, dead letters and summaries, byte for byte)."""

from __future__ import annotations

import random

import orjson
import pytest
from random_shapes import random_history, random_shape

from consolidator.rules.events import FieldNames
from consolidator.rules.policy import Policy
from consolidator.spark.shards import POISON_GROUP

pytestmark = pytest.mark.spark

MAX_BYTES = 4_096
START = 1_798_761_600_000

#: Layouts a group key claim must not get wrong (field "tenant"): duplicates, escapes, nesting,
#: whitespace, other types, lengths, invalid UTF-8, control characters, trailing text.
TRICKY = [
    b'{"tenant":"A","user":"u","tenant":"B"}', b'{"tenant":"A","user":"u","x":{"tenant":"B"}}',
    b'{"x":{"tenant":"B"},"user":"u"}', b'{"tenant":"A","user":"u","t\\u0065nant":"B"}',
    b'{ "tenant" :\t"A" ,\n"user":"u"}', b'{"tenant":7,"user":"u"}', b'{"user":"u","tenant":"A"}',
    b'["x",{"tenant":"A"}]', b'{"a":"\\"tenant\\":\\"B\\"","tenant":"A","user":"u"}',
    b'{"tenant":"A","user":"u"} trailing', b'{"tenant":"","user":"u"}',
    b'{"tenant":"' + b"t" * 192 + b'","user":"u"}', b'{"tenant":"' + b"t" * 191 + b'","user":"u"}',
    '{"tenant":"Ä😀","user":"u"}'.encode(), b'{"tenant":"A\xff","user":"u"}', b'{"tenant":"A\x01","user":"u"}',
    b'{"tenant":"A","user":"u","s":"tenant"}', b'{"tenant":"A","user":"u","tenant":"A"}',
    b'{"tenant":"A","user":"u","amount":"bad"}', b'{"tenant":"A","user":"u","tenant":{"x":1}}', b"",
    b'{"tenant":"A","user":"u","pad":"' + b"x" * MAX_BYTES + b'"}', b'{"tenant":"A","user":1}',
]


def _values(seed: int) -> tuple[FieldNames, list[bytes]]:
    rng = random.Random(seed)
    shape = random_shape(rng)
    values = [r.value for r in random_history(rng, START, count=60)] + TRICKY
    return FieldNames(group_key="tenant", item_id="user", shape=shape), values


@pytest.mark.parametrize("seed", range(3))
def test_a_claimed_group_key_is_events_decodes_or_the_value_is_poison(spark, seed):
    from pyspark.sql import functions as F

    from consolidator.spark.transforms import claimed_group_key, decode_value

    names, values = _values(seed)
    frame = spark.createDataFrame([(v,) for v in values], "value binary")
    claims = frame.select(claimed_group_key(F.col("value"), names, MAX_BYTES).alias("c")).collect()
    proven = 0
    for value, row in zip(values, claims, strict=True):
        if not row["c"]["ok"]:
            continue
        proven += 1
        decoded = decode_value(value, names, MAX_BYTES)
        assert decoded["group_key"] in (row["c"]["group_key"], POISON_GROUP), value
    assert proven >= 60  # every value of the random histories (no escapes, one "tenant")


@pytest.mark.parametrize("seed", range(4))
def test_decoding_after_the_shuffle_gives_the_reference_outputs(spark, seed):
    from consolidator.spark.replay import NamedPolicy, replay
    from consolidator.spark.transforms import records

    names, values = _values(seed)
    rng = random.Random(seed)
    rows = [("events", i % 2, i // 2, START + rng.randrange(0, 900_000), f"k{i}".encode(), v)
            for i, v in enumerate(values)]
    frame = records(spark.createDataFrame(rows, "topic string, partition int, offset long, timestamp long,"
                                                " key binary, value binary"))
    policies = [NamedPolicy("plain", Policy(debounce_ms=60_000, hard_window_ms=300_000, max_batch_size=rng.choice([3, 500]),
                                            tick_interval_ms=30_000)),
                NamedPolicy("ttl", Policy(debounce_ms=60_000, hard_window_ms=300_000, tick_interval_ms=30_000,
                                          ttl_ms=60_000))]

    def outputs(defer: bool) -> list[tuple]:
        result = replay(frame, policies, names, MAX_BYTES, defer=defer).collect()
        return sorted(tuple(orjson.dumps(v).decode() if isinstance(v, list) else v for v in r) for r in result)

    deferred, reference = outputs(True), outputs(False)
    assert [r for r in reference if r[0] == "dead_letter"] and [r for r in reference if r[0] == "batch"]
    assert deferred == reference
