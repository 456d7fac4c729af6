"""The event shape: spec validation, poison that follows the spec, the outputs and
the version 2 message."""

from __future__ import annotations

import jsonschema
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consolidator.rules.batch import Member, build_message, encode, load_schema, schema_name
from consolidator.rules.events import (
    FieldNames,
    KafkaRecord,
    PoisonEvent,
    PoisonReason,
    SourcePosition,
    decode,
)
from consolidator.rules.policy import FlushReason
from consolidator.rules.shape import (
    REFERENCE_SHAPE,
    EventView,
    Shape,
    ShapeError,
    ValueFault,
    parse_outputs,
    parse_payload,
    retain,
    stored_items,
    stored_text,
)
from consolidator.rules.split import (
    MessageOptions,
    message_bytes,
    message_bytes_bound,
    split_to_fit,
)
from consolidator.settings import ConfigurationError, IngestSettings, load_settings
from consolidator.sinks.sqs_text import escaped_bytes

SENSORS = parse_outputs(orjson.dumps([
    {"name": "readings", "op": "count"},
    {"name": "low", "op": "min", "path": "reading.celsius"},
    {"name": "high", "op": "max", "path": "reading.celsius"},
    {"name": "total", "op": "sum", "path": "reading.celsius"},
    {"name": "first_status", "op": "first", "path": "status"},
    {"name": "last_status", "op": "last", "path": "status"},
    {"name": "statuses", "op": "distinct", "path": "status"},
    {"name": "lines", "op": "group_sum", "path": "lines", "by": "code", "sum": ["n"]},
]).decode())
SHAPE = Shape(SENSORS)
NAMES = FieldNames(group_key="device", item_id="sensor", shape=SHAPE)
VALIDATORS = {v: jsonschema.Draft202012Validator(load_schema(v), format_checker=jsonschema.FormatChecker())
              for v in ("1", "1.1", "1.2", "2")}


def record(value: object, offset: int = 0) -> KafkaRecord:
    return KafkaRecord("t", 0, offset, 1_700_000_000_000, None, orjson.dumps(value))


def member(offset: int, item: str, event: dict, merged: int = 1) -> Member:
    return Member(SourcePosition("t", 0, offset), item, EventView(event), 1000 + offset, 2000 + offset, merged)


def test_one_error_names_every_bad_entry():
    with pytest.raises(ShapeError) as raised:
        parse_outputs('[{"name": "n", "op": "count"}, {"name": "s", "op": "sum"},'
                      ' {"name": "n", "op": "median", "path": "a"}, 7, {"name": "g", "op": "group_sum", "path": "x"}]')
    text = str(raised.value)
    for part in ("entry 1 ('s')", "entry 2 ('n'): name is used twice", "median", "entry 3: must be an object",
                 "entry 4 ('g')"):
        assert part in text
    assert "entry 0" not in text


def test_the_settings_refuse_a_bad_spec_at_start_up_naming_the_variable():
    environ = {"CONSOLIDATOR_DATABASE_URL": "mysql://u:p@h/db", "CONSOLIDATOR_DEAD_LETTER_URL": "file:///x.jsonl",
               "CONSOLIDATOR_AGGREGATE": '[{"name": "x", "op": "avg", "path": "a"}]',
               "CONSOLIDATOR_MEMBER_PAYLOAD": "some"}
    with pytest.raises(ConfigurationError) as raised:
        load_settings(IngestSettings, environ=environ)
    assert "CONSOLIDATOR_AGGREGATE" in str(raised.value) and "avg" in str(raised.value)
    assert "CONSOLIDATOR_MEMBER_PAYLOAD" in str(raised.value)


def test_a_spec_file_is_read(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text('[{"name": "n", "op": "count"}]')
    assert parse_outputs(str(spec))[0].name == "n"
    assert parse_payload('["a.b", "$.c"]') == (False, (("a", "b"), ("c",)))


def test_the_items_field_is_not_read_when_the_spec_does_not_read_it():
    event = decode(record({"device": "d1", "sensor": "s1", "items": "not a list", "status": "ok"}), NAMES, 1 << 20)
    assert event.item_id == "s1"
    assert event.items == EventView({"status": "ok"})  # only what the shape reads is kept


@pytest.mark.parametrize(("value", "path", "expected"), [
    ({"reading": {"celsius": "warm"}}, "reading.celsius", "expected number, got string"),
    ({"reading": {"celsius": True}}, "reading.celsius", "expected number, got boolean"),
    ({"reading": {"celsius": 2**63}}, "reading.celsius", "integer beyond int64"),
    ({"reading": 3}, "reading", "expected object, got integer"),
    ({"status": {"a": 1}}, "status", "expected number, got object"),
    ({"lines": {"code": "a"}}, "lines", "expected list, got object"),
    ({"lines": 3}, "lines", "expected list, got integer"),  # a number, fine for every other operation
    ({"lines": 2.5}, "lines", "expected list, got number"),
    ({"lines": "a"}, "lines", "expected list, got string"),
    ({"status": True}, "status", "expected number, got boolean"),
    ({"lines": [{"code": "", "n": 1}]}, "lines[0].code", "expected non-empty string"),
    ({"lines": [{"code": "a", "n": "1"}]}, "lines[0].n", "expected number, got string"),
    ({"lines": [{"code": "a", "n": 2**62}, {"code": "a", "n": 2**62}]}, "lines", "within int64"),
])
def test_a_wrong_typed_value_the_spec_needs_is_poison_naming_path_and_type(value, path, expected):
    with pytest.raises(PoisonEvent) as raised:
        decode(record({"device": "d1", "sensor": "s1", **value}), NAMES, 1 << 20)
    assert raised.value.reason is PoisonReason.BAD_VALUE
    assert raised.value.detail.startswith(path) and expected in raised.value.detail


def test_an_absent_or_null_value_contributes_nothing():
    event = decode(record({"device": "d1", "sensor": "s1", "reading": None}), NAMES, 1 << 20)
    message = build_message("d1", [member(0, "s1", event.items.event)], FlushReason.IDLE, 5000, shape=SHAPE)
    assert message["aggregates"] == {"readings": 1, "low": None, "high": None, "total": 0, "first_status": None,
                                     "last_status": None, "statuses": [], "lines": []}


def test_the_outputs_over_the_newest_event_of_each_item_in_position_order():
    members = [
        member(3, "s2", {"reading": {"celsius": 21.5}, "status": "ok", "lines": [{"code": "b", "n": 1}]}),
        member(1, "s1", {"reading": {"celsius": 30}, "status": "hot", "lines": [{"code": "a", "n": 2}]}),
        member(7, "s3", {"reading": {"celsius": -4}, "status": "ok", "lines": [{"code": "a", "n": 5}]}, merged=3),
        member(5, "s1", {"reading": {"celsius": 10}, "status": "cold"}),  # s1's newest event
    ]
    message = build_message("d1", members, FlushReason.IDLE, 9000, shape=SHAPE)
    assert message["aggregates"] == {
        "readings": 3, "low": -4, "high": 21.5, "total": 27.5, "first_status": "ok", "last_status": "ok",
        "statuses": ["cold", "ok"], "lines": [{"code": "a", "n": 5}, {"code": "b", "n": 1}]}
    assert message["schema_version"] == 2 and message["event_count"] == 6 and message["item_ids"] == ["s1", "s2", "s3"]
    assert [(m["offset"], m["item_id"]) for m in message["members"]] == [(1, "s1"), (3, "s2"), (5, "s1"), (7, "s3")]
    assert "event" not in message["members"][0]
    VALIDATORS["2"].validate(message)


def test_float_sums_are_rounded_once_whatever_the_order():
    values = [1e16, 1.0, -1e16, 0.1]
    forward = [member(i, f"i{i}", {"reading": {"celsius": v}}) for i, v in enumerate(values)]
    backward = [member(i, f"i{i}", {"reading": {"celsius": v}}) for i, v in enumerate(reversed(values))]
    totals = {build_message("d", ms, FlushReason.IDLE, 0, shape=SHAPE)["aggregates"]["total"] for ms in (forward, backward)}
    assert totals == {1.1}


def test_members_carry_their_event_whole_or_projected():
    event = {"status": "ok", "reading": {"celsius": 3, "raw": [1, 2]}, "extra": "x"}
    full = decode(record({"device": "d", "sensor": "s", **event}), FieldNames("device", "sensor", shape=Shape(
        SENSORS, full_payload=True)), 1 << 20)
    message = build_message("d", [Member(full.position, "s", full.items, 1, 2)], FlushReason.FULL, 3,
                            shape=Shape(SENSORS, full_payload=True))
    assert message["members"][0]["event"] == {"device": "d", "sensor": "s", **event}
    projected = Shape(SENSORS, payload_paths=(("reading", "raw"), ("extra",)))
    kept = decode(record({"device": "d", "sensor": "s", **event}), FieldNames("device", "sensor", shape=projected),
                  1 << 20)
    message = build_message("d", [Member(kept.position, "s", kept.items, 1, 2)], FlushReason.FULL, 3, shape=projected)
    assert message["members"][0]["event"] == {"reading": {"raw": [1, 2]}, "extra": "x"}
    assert message["aggregates"]["high"] == 3
    VALIDATORS["2"].validate(message)


def test_the_stored_form_round_trips_and_tells_the_two_shapes_apart():
    for items in ((("a", 1), ("b", 2)), EventView({"x": [1, {"y": None}]}), EventView([])):
        assert stored_items(stored_text(items)) == items


def test_a_claim_whose_integer_sum_would_leave_int64_is_split():
    members = [member(i, f"i{i}", {"reading": {"celsius": 2**62}}) for i in range(5)]
    batches = split_to_fit("d", members, FlushReason.IDLE, 0, None, MessageOptions(SHAPE))
    assert [len(b) for b in batches] == [1, 1, 1, 1, 1]
    for batch in batches:
        assert build_message("d", batch, FlushReason.IDLE, 0, shape=SHAPE)["aggregates"]["total"] == 2**62


_json = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                     max_leaves=6)


@settings(max_examples=60, deadline=None)
@given(shaped=st.booleans(), payload=st.sampled_from(["none", "full", '["status", "blob"]']),
       tracked=st.booleans(), rate_limited=st.booleans(), blobs=st.lists(_json, min_size=1, max_size=12),
       cap=st.integers(900, 4000), sqs=st.booleans())
def test_every_message_fits_the_cap_on_its_exact_bytes_and_validates_against_the_schema_it_names(
        shaped, payload, tracked, rate_limited, blobs, cap, sqs):
    """Every option combination: the encoded bytes as published (ack token, held-back time,
    payloads included), as the sink counts them (``sqs``: U+FFFF sent as a 6-byte escape), are
    within the cap, or the batch is one member that can never fit."""
    full, paths = parse_payload(payload)
    shape = Shape(SENSORS, full, paths) if shaped or payload != "none" else REFERENCE_SHAPE
    members = []
    for i, blob in enumerate(blobs):
        if shape.is_reference:
            members.append(Member(SourcePosition("t", 0, i), f"item-\x01\"\uffff{i}", ((f"sku{i % 3}\ufffe", i),), i,
                                  i + 1))
        else:
            members.append(member(i, f"item-{i % 5}", {"status": "ok\uffff", "blob": blob, "reading": {"celsius": i}}))
    options = MessageOptions(shape, tracked, rate_limited, escaped_bytes if sqs else len)
    for batch in split_to_fit("g", members, FlushReason.IDLE, 10_000, cap, options):
        message = build_message("g", batch, FlushReason.IDLE, 10_000, shape=shape,
                                ack_key=b"k" * 16 if tracked else None, held_back_ms=987_654_321 if rate_limited else 0)
        sent = options.measure(encode(message))
        assert sent <= cap or len(batch) == 1
        assert sent <= message_bytes("g", batch, FlushReason.IDLE, 10_000, options)
        assert sent <= message_bytes_bound("g", batch, options)
        body = encode(message)
        VALIDATORS[schema_name(message)].validate(orjson.loads(body))


def test_an_expired_row_of_a_generic_shape_carries_its_kept_event_bounded():
    from consolidator.rules.deadletter import MAX_ITEMS_CHARS, expired_entry

    entry = expired_entry("d", member(4, "s1", {"status": "ok"}), 10_000, 10_000)
    assert entry["event"] == {"status": "ok"} and "items" not in entry
    large = expired_entry("d", member(5, "s2", {"blob": "x" * MAX_ITEMS_CHARS}), 10_000, 10_000)
    assert large["event"] is None and large["event_truncated"] is True


def test_an_event_nested_too_deep_to_write_into_a_message_is_poison_not_an_error():
    deep = b'{"device": "d", "sensor": "s", "blob": ' + b"[" * 300 + b"]" * 300 + b"}"
    with pytest.raises(PoisonEvent) as raised:
        decode(KafkaRecord("t", 0, 0, 0, None, deep), FieldNames("device", "sensor", shape=Shape(SENSORS, True)),
               1 << 20)
    assert raised.value.reason is PoisonReason.BAD_VALUE and "nesting" in raised.value.detail
    fine = b'{"device": "d", "sensor": "s", "blob": ' + b"[" * 200 + b"]" * 200 + b"}"
    event = decode(KafkaRecord("t", 0, 0, 0, None, fine), FieldNames("device", "sensor", shape=Shape(SENSORS, True)),
                   1 << 20)
    message = build_message("d", [Member(event.position, "s", event.items, 1, 2)], FlushReason.IDLE, 3,
                            shape=Shape(SENSORS, True))
    assert orjson.loads(encode(message)) == message and stored_items(stored_text(event.items)) == event.items


@pytest.mark.parametrize("full", [True, False])
@pytest.mark.parametrize("depth", range(230, 262))
def test_near_the_nesting_limit_knowing_the_events_text_changes_nothing(depth, full):
    """``retain`` given the text skips the encoder's check when the text has few brackets."""
    text = b'{"device": "d", "sensor": "s", "blob": ' + b"[" * depth + b"]" * depth + b"}"
    shape = Shape(SENSORS, full, None if full else (("blob",),))

    def outcome(source):
        try:
            return "kept", retain(orjson.loads(text), shape, source)
        except ValueFault as fault:
            return "fault", str(fault)

    assert outcome(text) == outcome(None)


def test_a_projection_keeps_overlapping_paths_once_and_leaves_out_what_it_cannot_reach():
    shape = Shape(parse_outputs('[{"name": "n", "op": "count"}]'),
                  payload_paths=(("props", "page"), ("props",), ("tags", "first"), ("gone",)))
    document = {"props": {"page": "/a", "n": 1}, "tags": "not an object"}
    event = decode(record({"device": "d", "sensor": "s", **document}), FieldNames("device", "sensor", shape=shape),
                   1 << 20)
    assert event.items.event == {"props": {"page": "/a", "n": 1}}
