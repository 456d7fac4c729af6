"""The inline reading of MSK records (``parse_event``) gives exactly what the step-by-step reading
(``parse_event(exact=True)``) gives: the same records, the same rejected pieces with the same
reasons and details, in the same order (docs/semantics.md section 2)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consolidator.sources.msk import MAX_OFFSET, MAX_PARTITION, MAX_TIMESTAMP_MS, parse_event

ROOT = Path(__file__).resolve().parents[2]
GOOD = {"topic": "orders", "partition": 1, "offset": 5, "timestamp": 1_795_000_000_000,
        "timestampType": "CREATE_TIME", "key": "a2V5", "value": "eyJhIjoxfQ==", "headers": []}


def same(event) -> None:
    fast, exact = parse_event(event), parse_event(event, exact=True)
    assert fast.records == exact.records
    assert [(r.reason, r.detail, r.position, r.partition_key, r.timestamp_ms, r.key_b64, r.value_b64)
            for r in fast.rejected] == [
           (r.reason, r.detail, r.position, r.partition_key, r.timestamp_ms, r.key_b64, r.value_b64)
            for r in exact.rejected]


def event(*records) -> dict:
    return {"eventSource": "aws:kafka", "records": {"orders-1": list(records)}}


class Text(str):
    pass


# Each differs from GOOD in one field, just outside what the inline reading takes.
NEAR = [
    {"partition": True}, {"partition": -1}, {"partition": MAX_PARTITION + 1}, {"partition": 1.0},
    {"offset": -1}, {"offset": MAX_OFFSET + 1}, {"offset": False}, {"timestamp": None},
    {"timestamp": MAX_TIMESTAMP_MS + 1}, {"timestamp": -1}, {"topic": "bad topic"}, {"topic": "x" * 250},
    {"topic": "orders\n"}, {"topic": Text("orders")}, {"topic": ["orders"]}, {"topic": None}, {"topic": ""},
    {"key": "a2V5\n"}, {"key": "a2V"}, {"key": "a2V5="}, {"key": b"a2V5"}, {"key": 5}, {"value": "é"},
    {"value": "eyJhIjoxfQ"}, {"value": "ey JhIjoxfQ=="}, {"headers": {}}, {"headers": 0}, {"headers": ""},
    {"headers": [{"h": [1, 2, 255, -128]}]}, {"headers": [{"h": [256]}]}, {"headers": [{"h": [True]}]},
    {"headers": [[1]]}, {"headers": [{}]}, {"key": None, "value": None}, {"value": ""},
]


@pytest.mark.parametrize("change", NEAR, ids=repr)
def test_a_near_valid_record_reads_exactly_as_the_step_by_step_reading(change):
    same(event(GOOD, {**GOOD, **change}, GOOD))


def test_the_reading_of_the_sample_events_is_exact():
    for name in ("msk-orders.json", "msk-poison-mix.json"):
        same(json.loads((ROOT / "events" / name).read_text()))


def test_a_dict_subclass_record_is_refused_like_the_exact_reading():
    class Record(dict):
        pass

    same(event(Record(GOOD)))
    assert parse_event(event(Record(GOOD))).rejected


base64_text = st.binary(max_size=12).map(lambda b: base64.b64encode(b).decode())
fields = {
    "topic": st.sampled_from(["orders", "o.rders-1_x", "", "bad topic", "x" * 250]) | st.text(max_size=4),
    "partition": st.integers(-2, MAX_PARTITION + 2) | st.booleans() | st.none() | st.floats(0, 5),
    "offset": st.integers(-2, MAX_OFFSET + 2) | st.sampled_from([0, 1, 2**63 - 1]) | st.text(max_size=2),
    "timestamp": st.integers(-1, MAX_TIMESTAMP_MS + 1) | st.none(),
    "key": st.none() | base64_text | st.text(max_size=6) | st.binary(max_size=3),
    "value": st.none() | base64_text | st.text(max_size=6) | st.integers(),
    "headers": st.none() | st.just([]) | st.lists(st.dictionaries(
        st.text(max_size=2), st.lists(st.integers(-130, 260) | st.booleans(), max_size=3), max_size=2), max_size=2)
    | st.dictionaries(st.text(max_size=1), st.integers(), max_size=1),
}
records = st.fixed_dictionaries({}, optional=fields) | st.none() | st.integers() | st.lists(st.integers(), max_size=1)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["orders-1", "orders-2", "x"]),
                       st.lists(records, max_size=4) | st.none() | st.integers(), max_size=3))
def test_arbitrary_records_read_exactly_as_the_step_by_step_reading(batches):
    same({"eventSource": "aws:kafka", "records": batches})
