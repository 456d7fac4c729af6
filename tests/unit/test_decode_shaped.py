"""Under a generic shape, ``decode`` returns exactly what ``decode_exact`` returns (it is the one
path there): the same Event (position, identifiers, retained value, payload) for a valid record,
the same reason and detail for poison (docs/semantics.md section 2). The odd values here are the
Spark decoder's reference too (tests/unit/test_decode_shape.py)."""

from __future__ import annotations

import json
import random

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_shapes import random_history, random_shape
from support import examples

from consolidator.rules.events import FieldNames, KafkaRecord, PoisonEvent, decode, decode_exact
from consolidator.rules.shape import Shape

LIMIT = 4_096


def outcome(function, value: bytes | None, names: FieldNames, limit: int = LIMIT):
    try:
        return "event", function(KafkaRecord("events", 1, 9, 1_798_761_600_000, b"k", value), names, limit)
    except PoisonEvent as error:
        return "poison", (error.reason, error.detail)


def names_of(shape: Shape) -> FieldNames:
    return FieldNames(group_key="tenant", item_id="user", shape=shape)


def _deep(depth: int) -> bytes:
    return ('{"tenant":"T0","user":"u"' + ',"props":{"page":"/p"' * depth + "}" * depth + "}").encode()


#: Integer literals beyond 64 bits (the JSON parser reads doubles): classified by their literal
BIG_LITERALS = [b'{"tenant":100000000000000000000,"user":-9223372036854775809}',
                b'{"tenant":"T0","user":"u","amount":-9223372036854775809,"price":100000000000000000000}',
                b'{"tenant":"T0","user":"u","tags":18446744073709551616,"props":{"page":"12345678901234567890"}}',
                b'{"tenant":"T0","user":"u","lines":[{"code":"c","n":-99999999999999999999}],"amount":1e20}',
                b'{"tenant":"T0","user":"u","props":' + b"[" * 600 + b"100000000000000000000" + b"]" * 600 + b"}"]
ODD = [*BIG_LITERALS, None, b"", b"not json", b"[1,2]", b'"text"', b"\xff\xfe", b'\xef\xbb\xbf{"tenant":"T","user":"u"}',
       b'{"tenant":"T0"}', b'{"user":"u"}', b'{"tenant":7,"user":"u"}', b'{"tenant":"T0","user":3}',
       b'{"tenant":"","user":"u"}', b'{"tenant":"T","user":""}', b'{"tenant":true,"user":"u"}',
       b'{"tenant":"T","user":[1]}', ('{"tenant":"' + "t" * 192 + '","user":"u"}').encode(),
       ('{"tenant":"' + "\U0001f600" * 191 + '","user":"u"}').encode(), b'{"tenant":"T\\ud800","user":"u"}',
       b'{"tenant":"T0","user":"u","amount":1,"amount":"x"}', b'{"tenant":"T\\u00e9","user":"\\"u"}',
       b'{"tenant":"T0","user":"u","amount":18446744073709551615,"price":1e400}',
       b'{"tenant":"T0","user":"u","amount":9223372036854775808}', b'{"tenant":"T0","user":"u","price":"1"}',
       b'{"tenant":"T0","user":"u","props":[1],"lines":[{"code":"c","n":9223372036854775807},{"code":"c","n":1}]}',
       b'{"tenant":"T0","user":"u","lines":"x","props":{"page":{"a":[1]}}}', b'{"tenant":"T","user":"u","props":7}',
       orjson.dumps({"tenant": "T0", "user": "u", "x": "y" * LIMIT}), _deep(10), _deep(100), _deep(300),
       *(_deep(depth) for depth in range(240, 260))]


@pytest.mark.parametrize("seed", range(40))
def test_random_shapes_and_histories_get_the_exact_outcome(seed):
    rng = random.Random(seed)
    names = names_of(random_shape(rng))
    values = [r.value for r in random_history(rng, 1_798_761_600_000, count=80)] + ODD
    outcomes = [(outcome(decode, v, names), outcome(decode_exact, v, names)) for v in values]
    assert [fast for fast, _ in outcomes] == [exact for _, exact in outcomes]
    assert sum(fast[0] == "event" for fast, _ in outcomes) >= 20


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4) | st.sampled_from(["", "T", "u", "t" * 191, "t" * 192]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(
        st.sampled_from(["code", "n", "page", "x", "tenant", "user"]), children, max_size=3),
    max_leaves=10,
)
WELL_TYPED = [None, 0, -3, 2.5, 2**63 - 1, "s", {"page": "/p", "n": 1}, [{"code": "c", "n": 1}]]
FIELDS = ["tenant", "user", "amount", "price", "props", "lines", "tags"]


@st.composite
def near_valid(draw) -> bytes:
    """An event with the identifiers mostly right and the values the shapes read of any type,
    now and then a field twice or spelled with an escape."""
    entries = []
    for field in FIELDS:
        if draw(st.integers(0, 5)) == 0:
            continue
        if field in ("tenant", "user") and draw(st.integers(0, 3)):
            value = draw(st.sampled_from(["T0", "u1", "é", "", "x" * 191, "x" * 192, "\U0001f600" * 191]))
        elif field not in ("tenant", "user") and draw(st.booleans()):
            value = draw(st.sampled_from(WELL_TYPED))  # what every shape of random_shape accepts
        else:
            value = draw(json_values)
        key = draw(st.sampled_from([field, field, field[:-1] + "\\u00" + f"{ord(field[-1]):02x}"]))
        entries.append(f'"{key}":' + json.dumps(value))
        if draw(st.integers(0, 9)) == 0:
            entries.append(f'"{field}":' + json.dumps(draw(json_values)))
    return ("{" + ",".join(entries) + "}").encode()


@settings(max_examples=examples(800), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), value=near_valid(), limit=st.sampled_from([LIMIT, 40]))
def test_near_valid_events_get_the_exact_outcome(seed, value, limit):
    names = names_of(random_shape(random.Random(seed)))
    assert outcome(decode, value, names, limit) == outcome(decode_exact, value, names, limit)
