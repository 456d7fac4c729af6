import json

import pytest

from consolidator.rules.events import (
    FieldNames,
    KafkaRecord,
    PoisonEvent,
    PoisonReason,
    SourcePosition,
    bucket_of,
    decode,
)

NAMES = FieldNames()


def rec(value: bytes | None, offset: int = 7) -> KafkaRecord:
    return KafkaRecord("orders", 3, offset, 1_795_000_000_000, b"k", value)


def test_valid_event_keeps_identity_items_and_raw_payload():
    value = json.dumps({"location_id": "WH-42", "order_id": 17, "items": [{"sku": "S", "quantity": 0}]}).encode()
    event = decode(rec(value), NAMES, 1024)
    assert (event.group_key, event.item_id, event.items) == ("WH-42", "17", (("S", 0),))
    assert event.position == SourcePosition("orders", 3, 7)
    assert event.payload == value
    assert event.bucket == 202611


def test_field_names_are_configuration():
    names = FieldNames(group_key="store", item_id="id", items="lines", sku="code", quantity="n")
    value = json.dumps({"store": "S1", "id": "X", "lines": [{"code": "C", "n": 3}]}).encode()
    event = decode(rec(value), names, 1024)
    assert (event.group_key, event.item_id, event.items) == ("S1", "X", (("C", 3),))


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, PoisonReason.EMPTY_VALUE),
        (b"", PoisonReason.EMPTY_VALUE),
        (b"\xff\xfe{}", PoisonReason.NOT_UTF8),
        (b"{not json", PoisonReason.NOT_JSON),
        (b'{"location_id": NaN, "order_id": "A"}', PoisonReason.NOT_JSON),
        # lone surrogates cannot be stored as utf8mb4 nor encoded as UTF-8: poison, not a crash
        (b'{"location_id": "W\\ud800", "order_id": "A"}', PoisonReason.NOT_JSON),
        (b"[" * 5000 + b"]" * 5000, PoisonReason.NOT_JSON),  # deep nesting: not a RecursionError
        (b"[1, 2]", PoisonReason.NOT_OBJECT),
        (b'"text"', PoisonReason.NOT_OBJECT),
        (b'{"order_id": "A"}', PoisonReason.MISSING_GROUP_KEY),
        (b'{"location_id": "", "order_id": "A"}', PoisonReason.MISSING_GROUP_KEY),
        (b'{"location_id": "W"}', PoisonReason.MISSING_ITEM_ID),
        (b'{"location_id": "W", "order_id": ""}', PoisonReason.MISSING_ITEM_ID),
        (b'{"location_id": {"a": 1}, "order_id": "A"}', PoisonReason.BAD_GROUP_KEY),
        (b'{"location_id": true, "order_id": "A"}', PoisonReason.BAD_GROUP_KEY),
        (b'{"location_id": "W", "order_id": [1]}', PoisonReason.BAD_ITEM_ID),
        (json.dumps({"location_id": "W" * 192, "order_id": "A"}).encode(), PoisonReason.BAD_GROUP_KEY),
        (b'{"location_id": "W", "order_id": "A", "items": {"sku": "S"}}', PoisonReason.BAD_ITEMS),
        (b'{"location_id": "W", "order_id": "A", "items": [3]}', PoisonReason.BAD_ITEMS),
        (b'{"location_id": "W", "order_id": "A", "items": [{"quantity": 1}]}', PoisonReason.BAD_ITEMS),
        (b'{"location_id": "W", "order_id": "A", "items": [{"sku": "S", "quantity": -1}]}', PoisonReason.BAD_QUANTITY),
        (b'{"location_id": "W", "order_id": "A", "items": [{"sku": "S", "quantity": 1.5}]}', PoisonReason.BAD_QUANTITY),
        (b'{"location_id": "W", "order_id": "A", "items": [{"sku": "S", "quantity": "2"}]}', PoisonReason.BAD_QUANTITY),
        (b'{"location_id": "W", "order_id": "A", "items": [{"sku": "S", "quantity": true}]}', PoisonReason.BAD_QUANTITY),
        # integers beyond 64 bits are read as floats, so they are no quantity
        (b'{"location_id": "W", "order_id": "A", "items": [{"sku": "S", "quantity": 100000000000000000000}]}',
         PoisonReason.BAD_QUANTITY),
    ],
)
def test_every_poison_case_has_its_reason(value, reason):
    with pytest.raises(PoisonEvent) as caught:
        decode(rec(value), NAMES, 16 * 1024)
    assert caught.value.reason == reason
    assert caught.value.detail


def test_too_large_is_poison_before_parsing():
    value = json.dumps({"location_id": "W", "order_id": "A", "pad": "x" * 2000}).encode()
    with pytest.raises(PoisonEvent) as caught:
        decode(rec(value), NAMES, 1000)
    assert caught.value.reason == PoisonReason.TOO_LARGE
    assert str(len(value)) in caught.value.detail


def test_positions_sort_like_their_keys():
    positions = [SourcePosition("a", 0, 10), SourcePosition("a", 0, 9), SourcePosition("a", 1, 0),
                 SourcePosition("ab", 0, 0), SourcePosition("a", 0, 2**40)]
    assert sorted(positions) == sorted(positions, key=SourcePosition.sort_key)


def test_bucket_is_utc_month_of_record_timestamp():
    assert bucket_of(1_795_000_000_000) == 202611
    assert bucket_of(1_798_761_599_999) == 202612  # 2026-12-31T23:59:59.999Z
    assert bucket_of(1_798_761_600_000) == 202701


def _with_items(*quantities: int, skus: str = "S") -> bytes:
    items = [{"sku": skus[i % len(skus)], "quantity": q} for i, q in enumerate(quantities)]
    return json.dumps({"location_id": "W", "order_id": "A", "items": items}).encode()


@pytest.mark.parametrize("value, path", [
    (_with_items(2**63), "items[0].quantity"),  # read as an integer by both JSON parsers
    (_with_items(1, 2**64 - 1), "items[1].quantity"),
    (_with_items(2**62, 2**62 - 1, 1), "items[2].quantity"),  # each fits; their sum for one sku does not
    (_with_items(*[999_999_999_999_999_999] * 10), "items[9].quantity"),  # short enough for any fast path
])
def test_quantities_and_their_sums_beyond_int64_are_poison_with_the_path(value, path):
    """A Java consumer reads quantities as longs: nothing that overflows one is ever published."""
    with pytest.raises(PoisonEvent) as raised:
        decode(KafkaRecord("t", 0, 0, 0, None, value), FieldNames(), 262_144)
    assert raised.value.reason == PoisonReason.BAD_QUANTITY
    assert path in raised.value.detail and "2**63-1" in raised.value.detail


def test_int64_sums_are_per_sku_and_the_largest_fit():
    top = 2**63 - 1
    for value in (_with_items(top), _with_items(top, top, skus="ST"), _with_items(top - 1, 1)):
        event = decode(KafkaRecord("t", 0, 0, 0, None, value), FieldNames(), 262_144)
        assert sum(q for _, q in event.items) >= top
