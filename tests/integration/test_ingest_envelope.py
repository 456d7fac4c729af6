"""Arbitrary MSK events, envelope included, through the real ingest handler on MariaDB.

Every record ends stored, dead-lettered with a machine-readable reason, or reported failed
only while a dependency (here: the dead-letter destination) is down; nothing else escapes.
"""

from __future__ import annotations

import base64
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import examples, sql
from test_ingest_handler import load_handler

from consolidator.demo.lambda_context import LocalLambdaContext
from consolidator.rules.errors import DeliveryError
from consolidator.rules.events import PoisonReason, SourcePosition

REASONS = {str(r) for r in PoisonReason}
TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
orders = st.fixed_dictionaries({
    "location_id": st.sampled_from(["WH-1", "WH-2"]),
    "order_id": st.text(min_size=1, max_size=4) | st.integers(0, 99),
    "items": st.lists(st.fixed_dictionaries({"sku": st.sampled_from(["S1", "S2"]),
                                             "quantity": st.integers(0, 9)}), max_size=2),
})
values = st.one_of(
    orders.map(lambda o: json.dumps(o).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=20),
)
b64_values = st.one_of(values.map(lambda b: base64.b64encode(b).decode()), st.none(),
                       st.text(max_size=6), json_values)
MISSING = object()


def maybe(valid, invalid=json_values):
    """Mostly ``valid``, sometimes any JSON value or the field left out."""
    return st.one_of(valid, valid, valid, invalid, st.just(MISSING))


@st.composite
def msk_records(draw, partition_key_topic: str):
    fields = {
        "topic": draw(maybe(st.sampled_from([partition_key_topic, "t.b"]),
                            st.sampled_from(["", "bad topic", "x" * 250, "é"]) | json_values)),
        "partition": draw(maybe(st.integers(0, 3), st.sampled_from([-1, 2**31, True, "1", 1.0]))),
        "offset": draw(maybe(st.integers(0, 40), st.sampled_from([-5, 2**63, False, "7", 3.5]))),
        "timestamp": draw(maybe(st.integers(0, 2_000_000_000_000),
                                st.sampled_from([-1, 10**18, 1.5e12, "1795000000000"]))),
        "timestampType": "CREATE_TIME",
        "key": draw(maybe(st.none() | st.just("V0gtNDI="), b64_values)),
        "value": draw(maybe(values.map(lambda b: base64.b64encode(b).decode()), b64_values)),
        "headers": draw(maybe(st.lists(st.dictionaries(st.text(max_size=3), st.lists(st.integers(-128, 255),
                                                                                       max_size=3), max_size=1),
                                       max_size=2),
                              st.sampled_from([[{"h": [256]}], [{"h": "x"}], ["h"], {"h": [1]}]) | json_values)),
    }
    record = {name: value for name, value in fields.items() if value is not MISSING}
    return draw(st.one_of(st.just(record), st.just(record), st.just(record), st.just(record), json_values))


@st.composite
def msk_events(draw):
    partitions = {}
    for topic, partition in draw(st.lists(st.tuples(st.sampled_from(["orders", "t.b"]), st.integers(0, 3)),
                                          max_size=3, unique=True)):
        partitions[f"{topic}-{partition}"] = draw(st.lists(msk_records(topic), max_size=6)
                                                  | st.just(MISSING) | json_values)
    records = {k: v for k, v in partitions.items() if v is not MISSING}
    event = {"eventSource": draw(maybe(st.just("aws:kafka"), st.sampled_from(["aws:sqs", "", None]))),
             "eventSourceArn": "arn:aws:kafka:eu-west-1:1:cluster/c/x",
             "records": draw(maybe(st.just(records)))}
    event = {k: v for k, v in event.items() if v is not MISSING}
    return draw(st.one_of(st.just(event), st.just(event), st.just(event), json_values))


def _position(r: object) -> SourcePosition | None:
    """The test's own reading of a record's identity (topic name, int32 partition, int64 offset)."""
    if not isinstance(r, dict):
        return None
    topic, partition, offset = r.get("topic"), r.get("partition"), r.get("offset")
    if not (isinstance(topic, str) and TOPIC.fullmatch(topic)):
        return None
    if type(partition) is not int or not 0 <= partition < 2**31:
        return None
    if type(offset) is not int or not 0 <= offset < 2**63:
        return None
    return SourcePosition(topic, partition, offset)


def _pieces(event: object) -> tuple[list[SourcePosition], int]:
    """Identifiable record positions, and how many pieces cannot be identified."""
    if not isinstance(event, dict) or event.get("eventSource") != "aws:kafka":
        return [], 1
    records = event.get("records")
    if records is None:
        return [], 0
    if not isinstance(records, dict):
        return [], 1
    positions, unidentified = [], 0
    for batch in records.values():
        if not isinstance(batch, list):
            unidentified += 1
            continue
        for r in batch:
            position = _position(r)
            if position is None:
                unidentified += 1
            else:
                positions.append(position)
    return positions, unidentified


def _is_clean_order(r: dict) -> bool:
    """A record the generator built valid in every field: it must be stored, never dead-lettered."""
    try:
        value = json.loads(base64.b64decode(r["value"], validate=True))
    except (KeyError, TypeError, ValueError):
        return False
    if not isinstance(value, dict):  # JSON null, a list, a number: not an order
        return False
    headers = r.get("headers", [])
    items, order_id = value.get("items"), value.get("order_id")
    return (type(r.get("timestamp")) is int and 0 <= r["timestamp"] <= 2_000_000_000_000
            and r.get("key", None) in (None, "V0gtNDI=") and isinstance(headers, list)
            and all(isinstance(h, dict) and all(isinstance(v, list) and all(type(b) is int and -128 <= b <= 255
                                                                              for b in v) for v in h.values())
                    for h in headers)
            and value.get("location_id") in ("WH-1", "WH-2")
            and ((type(order_id) is str and 0 < len(order_id) <= 191) or type(order_id) is int)
            and type(items) is list
            and all(type(i) is dict and i.get("sku") in ("S1", "S2") and type(i.get("quantity")) is int
                    and i["quantity"] >= 0 for i in items))


def _marks(store) -> dict[tuple[str, int], int]:
    """Each partition's high-water offset: at or below it, a record is durable (stored or dead-lettered)."""
    return {(r["src_topic"], r["src_partition"]): r["high_water"]
            for r in sql(store, "SELECT src_topic, src_partition, high_water FROM partition_offsets")}


def _applied(marks: dict[tuple[str, int], int], position: SourcePosition) -> bool:
    return position.offset <= marks.get((position.topic, position.partition), -1)


def _reset(store, path) -> None:
    for table in ("buffer_rows", "partition_offsets", "applied_positions", "batches"):
        sql(store, f"DELETE FROM {table}")
    if path.is_file():
        path.unlink()


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("envelope")


SETTINGS = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                          HealthCheck.too_slow])


@SETTINGS
@given(event=msk_events())
def test_every_record_ends_stored_or_dead_lettered_and_nothing_escapes(event, monkeypatch, database_url, store,
                                                                       tmp_path):
    dead_letter = tmp_path / "dead-letter.jsonl"
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_URL", database_url)
    monkeypatch.setenv("CONSOLIDATOR_DEAD_LETTER_URL", f"file://{dead_letter}")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    module = _handler_module(database_url, "up")
    _reset(store, dead_letter)

    response = module.handler(event, LocalLambdaContext())

    assert response == {"batchItemFailures": []}  # every dependency is up
    entries = [json.loads(line) for line in dead_letter.read_text().splitlines()] if dead_letter.exists() else []
    assert all(e["reason"] in REASONS and e["kind"] == "poison" for e in entries)
    dead = {SourcePosition(**e["source"]) for e in entries if e["source"] is not None}
    marks = _marks(store)
    positions, unidentified = _pieces(event)
    for position in positions:
        assert _applied(marks, position), position  # stored or dead-lettered: the mark covers it
    assert sum(e["source"] is None for e in entries) == unidentified
    clean = [p for p, r in _identified_records(event) if _is_clean_order(r)]
    for position in clean:
        if positions.count(position) == 1:
            assert _applied(marks, position) and position not in dead, position


@SETTINGS
@given(event=msk_events())
def test_with_the_dead_letter_down_poison_is_reported_failed_and_only_unidentifiable_raises(
        event, monkeypatch, database_url, store, tmp_path):
    blocked = tmp_path / "not-a-file"
    blocked.mkdir(exist_ok=True)  # appending to a directory fails: the destination is down
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_URL", database_url)
    monkeypatch.setenv("CONSOLIDATOR_DEAD_LETTER_URL", f"file://{blocked}")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    module = _handler_module(database_url, "down")
    _reset(store, tmp_path / "unused")
    positions, unidentified = _pieces(event)

    if unidentified:
        with pytest.raises(DeliveryError):
            module.handler(event, LocalLambdaContext())
        assert _marks(store) == {}  # raised before anything was stored
        assert sql(store, "SELECT COUNT(*) AS n FROM buffer_rows") == [{"n": 0}]
        return
    response = module.handler(event, LocalLambdaContext())
    failed = {SourcePosition(*f["itemIdentifier"]["partition"].rsplit("-", 1), f["itemIdentifier"]["offset"])
              for f in response["batchItemFailures"]}
    failed = {SourcePosition(p.topic, int(p.partition), p.offset) for p in failed}
    marks = _marks(store)
    for position in positions:
        assert _applied(marks, position) or position in failed, position
    assert failed <= set(positions)
    for position in [p for p, r in _identified_records(event) if _is_clean_order(r)]:
        if positions.count(position) == 1 and not any(f.topic == position.topic and f.partition == position.partition
                                                      and f.offset < position.offset for f in failed):
            assert _applied(marks, position) and position not in failed, position


def _identified_records(event: object) -> list[tuple[SourcePosition, dict]]:
    if not isinstance(event, dict) or not isinstance(event.get("records"), dict):
        return []
    return [(p, r) for batch in event["records"].values() if isinstance(batch, list)
            for r in batch if (p := _position(r)) is not None]


_modules: dict[tuple[str, str], object] = {}


def _handler_module(database_url: str, label: str):
    """The handler module, loaded once per test database (its service is built on first use)."""
    key = (database_url, label)
    if key not in _modules:
        _modules.clear()
        _modules[key] = load_handler("ingest")
    return _modules[key]
