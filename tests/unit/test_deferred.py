"""Decoding after the shuffle (``spark/deferred.py``) gives what decoding before it gives: the
group key, item id, poison reason and detail of ``events.decode``, and for what the common case
decodes, the member payload and the outputs' values the simulation would compute from the items
text. A claimed group key that ``events.decode`` contradicts raises."""

from __future__ import annotations

import random

import orjson
import pyarrow as pa
import pytest
from random_shapes import random_history, random_shape
from test_decode_shape import _odd_values

from consolidator.rules.events import FieldNames
from consolidator.rules.shape import EventView, payload_of, stored_items
from consolidator.rules.shape_bounds import looked_values
from consolidator.spark.deferred import BrokenClaim, decode_deferred
from consolidator.spark.shards import POISON_GROUP
from consolidator.spark.transforms import DECODED_SCHEMA, decode_value

MAX_EVENT_BYTES = 4_096


def _table(values: list[bytes | None], claims: list[str], names: FieldNames) -> pa.Table:
    """Decoded rows as the shuffle hands them over: every other row decoded before it (items set),
    the others deferred (items null, the claimed group key, the value kept)."""
    rows = []
    for index, (value, claim) in enumerate(zip(values, claims, strict=True)):
        row = {"topic": "t", "partition": 0, "offset": index, "timestamp_ms": 0, "key": b"k", "value": value,
               "group_key": claim, "item_id": None, "items": None, "poison_reason": None, "poison_detail": None}
        if index % 2:
            row.update(decode_value(value or b"", names, MAX_EVENT_BYTES))
            row["value"] = value if row["group_key"] == POISON_GROUP else None
        rows.append(row)
    schema = pa.schema([pa.field(f.name, _arrow(f.dataType.simpleString())) for f in DECODED_SCHEMA.fields])
    return pa.Table.from_pylist(rows, schema=schema)


def _arrow(kind: str) -> pa.DataType:
    return {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64(), "binary": pa.binary()}[kind]


@pytest.mark.parametrize("seed", range(30))
def test_rows_decoded_after_the_shuffle_are_those_decoded_before_it(seed):
    rng = random.Random(seed)
    shape = random_shape(rng)
    names = FieldNames(group_key="tenant", item_id="user", shape=shape)
    values = [r.value for r in random_history(rng, 1_798_761_600_000, count=80)] + _odd_values(rng)
    expected = [decode_value(v or b"", names, MAX_EVENT_BYTES) for v in values]
    # the claim is events.decode's group key (any claim will do for poison)
    claims = [e["group_key"] if e["group_key"] != POISON_GROUP else "anything" for e in expected]
    table, parsed = decode_deferred(_table(values, claims, names), names, MAX_EVENT_BYTES)
    got = table.to_pylist()
    kept_rows = 0
    for index, (row, want) in enumerate(zip(got, expected, strict=True)):
        assert (row["group_key"], row["item_id"]) == (want["group_key"], want.get("item_id"))
        assert (row["poison_reason"], row["poison_detail"]) == (want.get("poison_reason"), want.get("poison_detail"))
        kept = parsed[index]
        if kept is None:
            assert row["items"] == want.get("items")
            continue
        kept_rows += 1
        assert index % 2 == 0 and row["items"] is None
        event = stored_items(want["items"])
        assert kept.view() == event
        assert kept.looked == looked_values(shape, event.event)
        assert kept.payload == (orjson.dumps(payload_of(EventView(event.event), shape), option=orjson.OPT_SORT_KEYS)
                                .decode() if shape.carries_payload else None)
    assert kept_rows >= 15


def test_a_claim_events_decode_contradicts_raises():
    names = FieldNames(group_key="tenant", item_id="user", shape=random_shape(random.Random(1)))
    values = [b'{"tenant":"A","user":"u"}']
    with pytest.raises(BrokenClaim):
        decode_deferred(_table(values, ["B"], names), names, MAX_EVENT_BYTES)


def test_a_chunk_without_deferred_rows_is_left_alone():
    names = FieldNames(group_key="tenant", item_id="user", shape=random_shape(random.Random(2)))
    table = _table([None, b'{"tenant":"A","user":"u"}'], ["x", "A"], names).slice(1)
    assert decode_deferred(table, names, MAX_EVENT_BYTES) == (table, None)
