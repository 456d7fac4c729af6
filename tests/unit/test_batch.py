"""Batch message v1: aggregation, deterministic batch id, canonical bytes, JSON Schema."""

from __future__ import annotations

import hashlib
import json

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from consolidator.rules.batch import Member, batch_id, build_message, encode, load_schema
from consolidator.rules.events import SourcePosition
from consolidator.rules.policy import FlushReason

T0 = 1_795_000_000_000


def member(offset: int, item: str, items, partition: int = 0, first: int = T0, last: int = T0, merged: int = 1):
    return Member(SourcePosition("orders", partition, offset), item, tuple(items), first, last, merged)


def test_batch_id_is_deterministic_and_order_independent():
    a = [SourcePosition("orders", 0, 5), SourcePosition("orders", 1, 2)]
    assert batch_id("WH-1", a) == batch_id("WH-1", list(reversed(a)))
    assert len(batch_id("WH-1", a)) == 32
    assert batch_id("WH-1", a) != batch_id("WH-2", a)
    assert batch_id("WH-1", a) != batch_id("WH-1", a[:1])


_TOPICS = st.sampled_from(["orders", "ördérs", "t", "", "a\x00b", "\U0001f600", "x:1"])


def _field(text: str) -> bytes:
    data = text.encode()
    return b"%d:%b" % (len(data), data)


@given(st.text(max_size=8), st.sampled_from(["batch", "expired"]),
       st.lists(st.builds(SourcePosition, _TOPICS, st.integers(-2, 3), st.integers(-2**63, 2**63 - 1)), max_size=30),
       st.dictionaries(_TOPICS, st.integers(0, 3)))
def test_the_batch_id_hashes_each_sorted_position_as_four_length_prefixed_fields(group_key, kind, positions, epochs):
    """The id's text as the docstring defines it, field by field: however the id is computed,
    any position of any partition, topic or epoch gets this id."""
    text = b"consolidator-batch-v2" + _field(kind) + _field(group_key) + b"".join(
        _field(topic) + _field(str(epochs.get(topic, 0))) + _field(str(partition)) + _field(str(offset))
        for topic, partition, offset in sorted(positions))
    assert batch_id(group_key, positions, epochs, kind) == hashlib.sha256(text).hexdigest()[:32]


def test_batch_ids_of_different_inputs_differ_whatever_the_group_key_holds():
    """The v1 input joined fields with tabs and newlines, which a group key may
    hold, so a group key could swallow a member's position line and take another batch's id."""
    orders = [SourcePosition("orders", 0, 5), SourcePosition("orders", 0, 6)]
    assert batch_id("G", orders) != batch_id("G\norders\t0\t5", orders[1:])
    assert batch_id("G\t1", [SourcePosition("t", 1, 2)]) != batch_id("G", [SourcePosition("1\nt", 1, 2)])
    assert batch_id("G", orders, kind="expired") != batch_id("G", orders)


def test_a_topic_epoch_changes_the_batch_id_of_its_members_only():
    positions = [SourcePosition("orders", 0, 5)]
    assert batch_id("G", positions, {"orders": 1}) != batch_id("G", positions)
    assert batch_id("G", positions, {"orders": 0}) == batch_id("G", positions) == batch_id("G", positions, {"x": 3})
    message = build_message("G", [member(5, "A", [("S", 1)])], FlushReason.IDLE, T0, epochs={"orders": 2})
    assert message["batch_id"] == batch_id("G", positions, {"orders": 2})


def test_items_are_summed_per_sku_and_counts_include_coalesced_events():
    members = [
        member(3, "A1", [("SKU-1", 2), ("SKU-2", 1)], merged=3),
        member(4, "A2", [("SKU-1", 5)], first=T0 + 1000, last=T0 + 9000),
    ]
    message = build_message("WH-1", members, FlushReason.IDLE, T0 + 400_000)
    assert message["items"] == [{"sku": "SKU-1", "quantity": 7}, {"sku": "SKU-2", "quantity": 1}]
    assert message["item_ids"] == ["A1", "A2"]
    assert message["event_count"] == 4
    assert message["flush_reason"] == "idle"
    assert message["first_event_at"] == "2026-11-18T11:06:40.000Z"
    assert message["flushed_at"] == "2026-11-18T11:13:20.000Z"
    assert message["batch_id"] == batch_id("WH-1", [m.position for m in members])


def test_same_item_in_two_buckets_counts_its_newest_event_once():
    members = [member(1, "A1", [("SKU-1", 2)]), member(9, "A1", [("SKU-1", 3)])]
    message = build_message("WH-1", members, FlushReason.FULL, T0)
    assert message["items"] == [{"sku": "SKU-1", "quantity": 3}]
    assert message["item_count"] == 1
    assert len(message["members"]) == 2


def test_encoding_is_canonical_so_republishes_are_byte_identical():
    members = [member(2, "B", [("X", 1)]), member(1, "A", [("Y", 2)])]
    first = encode(build_message("WH-1", members, FlushReason.HARD_WINDOW, T0))
    again = encode(build_message("WH-1", list(reversed(members)), FlushReason.HARD_WINDOW, T0))
    assert first == again


def test_batch_id_and_bytes_are_stable_across_versions():
    """Downstream deduplicates on batch_id and may compare bytes: both formats are frozen for v1.
    The id is frozen; an id once assigned (a v1 id, claimed before schema 9) is sent as stored."""
    positions = [SourcePosition("orders", 2, 10), SourcePosition("orders", 0, 7), SourcePosition("ördérs", 1, 2**40)]
    assert batch_id("WH-42", positions) == "bc4fd9f0ad8b3a94b2a4b4c6dcdc352d"
    members = [Member(p, f"I{i}", (("S", 1),), T0, T0) for i, p in enumerate(positions)]
    v1_id = "70143871a422e25ea2f3444a30944322"
    assert build_message("WH-42", members, FlushReason.FULL, T0, assigned_id=v1_id)["batch_id"] == v1_id, \
        "a batch claimed before schema 9 keeps its v1 id"
    message = build_message("WH-42", [member(1, "Ö\u2028", [("SKU-\x01\"\\", 2**40)], first=T0 + 123)],
                            FlushReason.FULL, T0 + 30_000)
    assert encode(message) == json.dumps(message, sort_keys=True, separators=(",", ":"),
                                         ensure_ascii=False).encode()
    assert message["first_event_at"] == "2026-11-18T11:06:40.123Z"
    message["items"][0]["quantity"] = 2**70  # beyond what orjson writes: the same canonical form
    assert encode(message) == json.dumps(message, sort_keys=True, separators=(",", ":"),
                                         ensure_ascii=False).encode()


def test_messages_validate_against_the_shipped_schema_and_bad_ones_do_not():
    schema = load_schema()
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    message = build_message("WH-1", [member(1, "A1", [("SKU-1", 2)])], FlushReason.FULL, T0)
    validator.validate(message)
    broken = dict(message, flush_reason="later")
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({k: v for k, v in message.items() if k != "batch_id"})


def test_empty_batch_is_refused():
    with pytest.raises(ValueError):
        build_message("WH-1", [], FlushReason.IDLE, T0)


@pytest.mark.parametrize("cap", [600, 2_000, 9_000])
def test_split_to_fit_keeps_order_and_takes_the_longest_prefix_that_fits(cap):
    from consolidator.rules.split import message_bytes, split_to_fit

    members = [member(i, f"O{i}", [(f"SKU-{i}-{k}", k) for k in range(i % 7)]) for i in range(120)]
    batches = split_to_fit("WH-1", members, FlushReason.FULL, T0, cap)
    assert [m for b in batches for m in b] == members, "every member once, in claim order"
    rest = list(members)
    for batch in batches:
        size = message_bytes("WH-1", batch, FlushReason.FULL, T0)
        assert size <= cap or len(batch) == 1
        if len(batch) < len(rest):  # the next member would not have fitted
            assert message_bytes("WH-1", rest[: len(batch) + 1], FlushReason.FULL, T0) > cap
        rest = rest[len(batch):]
    assert split_to_fit("WH-1", members, FlushReason.FULL, T0, None) == [members]


def test_the_size_bound_is_never_below_the_message_size():
    import random

    from consolidator.rules.split import message_bytes, message_bytes_bound

    rng = random.Random(7)
    alphabet = "aZ9-\"\\\n\u00e9\u4e2d\U0001f600\x01"
    for _ in range(300):
        members = [
            member(rng.randrange(2**62), "".join(rng.choices(alphabet, k=rng.randrange(1, 12))),
                   [("".join(rng.choices(alphabet, k=rng.randrange(1, 8))), rng.randrange(2**63))
                    for _ in range(rng.randrange(0, 5))], partition=rng.randrange(2**31), merged=rng.randrange(1, 10**6))
            for _ in range(rng.randrange(1, 40))
        ]
        group = "".join(rng.choices(alphabet, k=rng.randrange(1, 20)))
        assert message_bytes_bound(group, members) >= message_bytes(group, members, FlushReason.HARD_WINDOW, T0)
