"""The C fast path of ``decode`` returns exactly what the exact path returns: the same Event
for a valid record, the same reason and detail for poison (docs/semantics.md section 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import examples

from consolidator.rules import events
from consolidator.rules.events import FieldNames, KafkaRecord, PoisonEvent, decode, decode_exact

NAMES = FieldNames()
ROOT = Path(__file__).resolve().parents[2]
VALID = b'{"location_id": "W", "order_id": "A", "items": [{"sku": "S", "quantity": 2}]}'


def rec(value: bytes | None) -> KafkaRecord:
    return KafkaRecord("orders", 3, 7, 1_795_000_000_000, b"k", value)


def outcome(function, value: bytes | None, names: FieldNames = NAMES, limit: int = 16 * 1024):
    try:
        return "event", function(rec(value), names, limit)
    except PoisonEvent as error:
        return "poison", (error.reason, error.detail)


def doc(*entries: tuple[bytes, bytes]) -> bytes:
    """A JSON object written byte by byte: duplicate keys, escaped keys and raw values allowed."""
    return b"{" + b",".join(b'"' + key + b'":' + value for key, value in entries) + b"}"


BASE = ((b"location_id", b'"W"'), (b"order_id", b'"A"'))

POISON_CORPUS = [
    None, b"", b"\xff\xfe{}", b"{not json", b'{"location_id": NaN, "order_id": "A"}',
    b'{"location_id": "W\\ud800", "order_id": "A"}', b"[" * 5000 + b"]" * 5000, b"[1, 2]", b'"text"',
    b'{"order_id": "A"}', b'{"location_id": "", "order_id": "A"}', b'{"location_id": "W"}',
    b'{"location_id": "W", "order_id": ""}', b'{"location_id": {"a": 1}, "order_id": "A"}',
    b'{"location_id": true, "order_id": "A"}', b'{"location_id": "W", "order_id": [1]}',
    json.dumps({"location_id": "W" * 192, "order_id": "A"}).encode(),
    b'{"location_id": "W", "order_id": "A", "items": {"sku": "S"}}',
    b'{"location_id": "W", "order_id": "A", "items": [3]}',
    b'{"location_id": "W", "order_id": "A", "items": [{"quantity": 1}]}',
    b'{"location_id": "W", "order_id": "A", "items": [{"sku": "S", "quantity": -1}]}',
    b'{"location_id": "W", "order_id": "A", "items": [{"sku": "S", "quantity": 1.5}]}',
    b'{"location_id": "W", "order_id": "A", "items": [{"sku": "S", "quantity": "2"}]}',
    b'{"location_id": "W", "order_id": "A", "items": [{"sku": "S", "quantity": true}]}',
    b'{"location_id": "W", "order_id": "A", "items": [{"sku": "S", "quantity": 100000000000000000000}]}',
    # What msgspec alone would let through in a field the event does not use:
    doc(*BASE, (b"x", b"1e999")), doc(*BASE, (b"x", b"-1E400")), doc(*BASE, (b"x", b"1.7976931348623159e308")),
    doc(*BASE, (b"x", b"1" + b"0" * 310)), doc(*BASE, (b"x", b'"\xff"')), doc(*BASE, (b"x", b'"\xed\xa0\x80"')),
    doc(*BASE, (b"x", b'"\xc0\xaf"')), doc(*BASE, (b"x", b'"\xf4\x90\x80\x80"')),
    doc(*BASE, (b"items", b"[]"), (b"item\\u0073", b'"late duplicate, escaped"')),
    doc(*BASE, (b"items", b'[{"sku": "S", "quantity": 1, "x": 1e999}]')),
    doc(*BASE, (b"x", b"[" * 1000 + b"]" * 1000), (b"order_id", b"[]")),
    doc(*BASE, (b"location_id", b"7.5")), doc((b"location_id", b"1"), (b"order_id", b"null")),
    b'\xef\xbb\xbf{"location_id": "W", "order_id": "A"}', doc(*BASE) + b"\x00",
    # invalid UTF-8 in a field the event reads (msgspec raises UnicodeDecodeError there)
    b'{"order_id":"\xff"}', doc((b"location_id", b'"W\xed\xa0\x80"'), (b"order_id", b'"A"')),
    doc(*BASE, (b"items", b'[{"sku": "\xc0\xaf", "quantity": 1}]')),
    # beyond int64, alone or summed for one sku: poison, not for a Java consumer to overflow on
    doc(*BASE, (b"items", b'[{"sku": "S", "quantity": 18446744073709551615}]')),
    doc(*BASE, (b"items", b'[{"sku": "S", "quantity": 9223372036854775807}, {"sku": "S", "quantity": 1}]')),
]
POISON_CORPUS += [
    __import__("base64").b64decode(r["value"]) if r.get("value") else None
    for batch in json.loads((ROOT / "events" / "msk-poison-mix.json").read_text())["records"].values()
    for r in batch
]


@pytest.mark.parametrize("value", POISON_CORPUS)
def test_every_record_of_the_poison_corpus_gets_the_exact_reason_and_detail(value):
    assert outcome(decode, value) == outcome(decode_exact, value)


def test_the_corpus_holds_poison_and_valid_events_alike():
    kinds = [outcome(decode_exact, v)[0] for v in POISON_CORPUS]
    assert kinds.count("poison") >= 40 and "event" in kinds  # the mix file has valid neighbours


@pytest.mark.parametrize("value", [
    VALID, doc(*BASE), doc(*BASE, (b"items", b"null")), doc(*BASE, (b"x", b"[1e308, 123e-500, 0.1e309]")),
    doc(*BASE, (b"order_id", b'"B"')), doc((b"location\\u005fid", b'"W"'), (b"order_id", b'"\\ud83d\\ude00"')),
    doc(*BASE, (b"items", b'[{"sku": "S", "quantity": 9223372036854775807}]')),  # int64's largest
    doc((b"location_id", b"17"), (b"order_id", b'"A"')),
    doc((b"location_id", b'"' + ("\U0001f600" * 191).encode() + b'"'), (b"order_id", b'"A"')),
])
def test_valid_edge_cases_decode_to_the_same_event(value):
    fast, exact = outcome(decode, value), outcome(decode_exact, value)
    assert fast == exact and fast[0] == "event"


def test_a_plain_event_never_reaches_the_exact_path(monkeypatch):
    def refuse(*args):
        raise AssertionError("exact path used")

    monkeypatch.setattr(events, "decode_exact", refuse)
    with_extra = doc(*BASE, (b"note", b'{"any": ["thing", 1.5, null]}'))
    assert decode(rec(VALID), NAMES, 1024).items == (("S", 2),)
    assert decode(rec(with_extra), NAMES, 1024).group_key == "W"


def test_colliding_field_names_take_the_exact_path():
    names = FieldNames(group_key="id", item_id="id")
    assert outcome(decode, b'{"id": "X"}', names) == outcome(decode_exact, b'{"id": "X"}', names)


# Near-valid values: the valid shape with one or more fields bent, encoded byte by byte.
RAW_ODDITIES = [b"1e999", b"-1e400", b"1" + b"0" * 320, b'"\xff"', b'"\xed\xa0\x80"', b"NaN", b'"\\ud800"',
                b"01", b"1.", b"[1,]", b"[" * 1030 + b"]" * 1030, b'"\\u0000"', b"-0", b"1E2", b"true"]
json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
    st.text(max_size=5), st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -1, 0]),
)
identifier = st.one_of(
    st.text(min_size=0, max_size=4), st.integers(-5, 2**65), json_scalar,
    st.sampled_from(["W" * 191, "W" * 192, "\u00e9" * 191, "\U0001f600" * 191, " ", "A "]),
    st.lists(st.integers(), max_size=2),
)
item = st.one_of(
    st.fixed_dictionaries({"sku": st.one_of(st.text(max_size=3), json_scalar),
                           "quantity": st.one_of(st.integers(-3, 2**65), json_scalar)},
                          optional={"extra": json_scalar}),
    json_scalar,
)
items = st.one_of(st.none(), st.lists(item, max_size=3), json_scalar, st.dictionaries(st.text(max_size=2), json_scalar))


def _json(value) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


@st.composite
def near_valid(draw) -> bytes:
    entries = []
    for key, strategy in ((b"location_id", identifier), (b"order_id", identifier), (b"items", items)):
        if draw(st.integers(0, 9)) == 0:
            continue  # the field is missing
        spelled = draw(st.sampled_from([key, key, key, key.replace(b"_", b"\\u005f") if b"_" in key
                                        else key[:-1] + b"\\u0073"]))
        entries.append((spelled, _json(draw(strategy))))
    for _ in range(draw(st.integers(0, 2))):
        value = draw(st.one_of(st.sampled_from(RAW_ODDITIES), json_scalar.map(_json)))
        entries.insert(draw(st.integers(0, len(entries))), (draw(st.sampled_from([b"x", b"items", b"order_id"])), value))
    return doc(*entries)


@settings(max_examples=examples(1500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=near_valid())
def test_near_valid_values_get_the_same_outcome_on_both_paths(value):
    assert outcome(decode, value) == outcome(decode_exact, value)


@settings(max_examples=300, deadline=None)
@given(value=st.binary(max_size=60).map(lambda tail: VALID[:-2] + tail))
def test_truncated_or_garbled_tails_get_the_same_outcome(value):
    assert outcome(decode, value) == outcome(decode_exact, value)
