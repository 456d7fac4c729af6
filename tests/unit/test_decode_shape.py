"""The batch decoder of a generic event shape gives exactly ``events.decode``'s results where it
decodes a value, decodes the common case itself and leaves the rest (poison, integer
identifiers, deep nesting) to ``events.decode``."""

from __future__ import annotations

import json
import random

import orjson
import pytest
from random_shapes import random_history, random_shape
from test_decode_shaped import BIG_LITERALS

from consolidator.rules.events import FieldNames
from consolidator.rules.shape import Shape, parse_outputs
from consolidator.spark.decode_shape import decode_shaped
from consolidator.spark.transforms import decode_value

MAX_EVENT_BYTES = 4_096


def _odd_values(rng: random.Random) -> list[bytes | None]:
    """Values the fast loop must not get wrong: not JSON, not objects, identifiers of other
    types or lengths, too large, too deep, duplicate keys, escapes."""
    deep = _deep(rng.choice([10, 100]))
    return [None, b"", b"not json", b"[1,2]", b'"text"', b'{"tenant":"T0"}', b'{"tenant":7,"user":"u"}',
            b'{"tenant":"T0","user":3}', b'{"tenant":"","user":"u"}', ('{"tenant":"' + "t" * 192 + '","user":"u"}').encode(),
            b'{"tenant":"T0","user":"u","amount":1,"amount":"x"}', b'{"tenant":"T\\u00e9","user":"\\"u"}',
            b'{"tenant":"T0","user":"u","amount":18446744073709551615,"price":1e400}',
            b'{"tenant":"T0","user":"u","props":[1],"lines":[{"code":"c","n":9223372036854775807},{"code":"c","n":1}]}',
            b'{"tenant":"T0","user":"u","lines":"x","props":{"page":{"a":[1]}}}',
            b"\xff\xfe", orjson.dumps({"tenant": "T0", "user": "u", "x": "y" * MAX_EVENT_BYTES}), deep,
            *BIG_LITERALS]


def _deep(depth: int) -> bytes:
    return ('{"tenant":"T0","user":"u"' + ',"props":{"page":"/p"' * depth + "}" * depth + "}").encode()


@pytest.mark.parametrize("seed", range(40))
def test_decoded_values_are_what_events_decode_gives(seed):
    rng = random.Random(seed)
    shape = random_shape(rng)
    names = FieldNames(group_key="tenant", item_id="user", shape=shape)
    values = [r.value for r in random_history(rng, 1_798_761_600_000, count=100)] + _odd_values(rng)
    groups, items, texts, rest = decode_shaped(values, names, MAX_EVENT_BYTES)
    assert set(rest) == {i for i, g in enumerate(groups) if g is None}
    decoded = 0
    for index, value in enumerate(values):
        expected = decode_value(value or b"", names, MAX_EVENT_BYTES)
        if groups[index] is None:
            continue
        decoded += 1
        assert (groups[index], items[index], texts[index]) == (expected["group_key"], expected["item_id"],
                                                              expected["items"])
    assert decoded >= 30  # the common case (a string user, about half of them) is decoded here


def test_what_it_leaves_is_left_for_a_reason():
    shape = Shape(parse_outputs(json.dumps([{"name": "n", "op": "sum", "path": "amount"}])), True)
    names = FieldNames(group_key="tenant", item_id="user", shape=shape)
    values = [b'{"tenant":"T","user":"u","amount":1}', b'{"tenant":"T","user":"u","amount":"1"}',
              b'{"tenant":"T","user":1,"amount":1}', b'{"tenant":"T","user":"u","amount":9223372036854775808}']
    groups, _, _, rest = decode_shaped(values, names, MAX_EVENT_BYTES)
    assert rest == [1, 2, 3] and groups[0] == "T"
    assert decode_value(values[2], names, MAX_EVENT_BYTES)["item_id"] == "1"  # an integer id: events.decode's


def test_events_nested_about_as_deep_as_the_encoder_goes_are_decoded_as_events_decode_does():
    names = FieldNames(group_key="tenant", item_id="user",
                       shape=Shape(parse_outputs('[{"name": "n", "op": "count"}]'), True))
    values = [_deep(depth) for depth in range(240, 260)]
    _, _, texts, rest = decode_shaped(values, names, 1 << 20)
    expected = [decode_value(v, names, 1 << 20) for v in values]
    assert [e.get("poison_reason") for e in expected].count("bad_value") == 10  # the encoder's limit is in range
    assert [e.get("items") for e in expected] == texts
    assert rest == [i for i, e in enumerate(expected) if e.get("poison_reason")]
