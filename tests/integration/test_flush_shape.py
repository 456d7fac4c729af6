"""The event shape on the Lambda path: real MariaDB, ingest then flush, every option
combination (shape, member payload, completion tracking, rate limit) under a small byte cap."""

from __future__ import annotations

import itertools

import jsonschema
import orjson
import pytest
from support import record
from test_flush import RecordingSink, make_service

from consolidator.rules.batch import load_schema, schema_name
from consolidator.rules.events import FieldNames, decode
from consolidator.rules.policy import Policy, RateLimit
from consolidator.rules.shape import REFERENCE_SHAPE, Shape, parse_outputs

CAP = 4000
SPEC = parse_outputs('[{"name": "n", "op": "count"}, {"name": "total", "op": "sum", "path": "amount"},'
                     ' {"name": "pages", "op": "distinct", "path": "props.page"},'
                     ' {"name": "last_page", "op": "last", "path": "props.page"}]')
VALIDATORS = {v: jsonschema.Draft202012Validator(load_schema(v), format_checker=jsonschema.FormatChecker())
              for v in ("1", "1.1", "1.2", "2")}


def value(i: int) -> bytes:
    return orjson.dumps({"location_id": f"T{i % 2}", "order_id": f"user-{i}", "amount": i,
                         "items": [{"sku": f"S{i % 3}", "quantity": 1}],
                         "props": {"page": f"/p/{i % 7}", "text": "x" * (40 + i % 200)}})


@pytest.mark.parametrize(("shape", "tracked", "limited"), list(itertools.product(
    [REFERENCE_SHAPE, Shape(SPEC), Shape(SPEC, full_payload=True), Shape(SPEC, payload_paths=(("props", "text"),))],
    [False, True], [False, True])))
def test_every_published_message_fits_the_cap_and_validates(store, clock, tmp_path, shape, tracked, limited):
    names = FieldNames(shape=shape)
    records = [record(i, value(i)) for i in range(400)]
    stored = store.ingest([decode(r, names, 1 << 20) for r in records], clock.now_ms()).stored
    assert stored == 400
    policy = Policy(debounce_ms=1000, hard_window_ms=1000, max_batch_size=500, tick_interval_ms=1000,
                    rate_limit=RateLimit(2, 60_000) if limited else None, max_batch_bytes=CAP)
    sink = RecordingSink(tmp_path / "out.jsonl")
    service = make_service(store, sink, clock, tmp_path, policy, names=names, completion_tracking=tracked,
                           max_rows_per_tick=1_000_000)
    for _ in range(60):
        clock.advance(30_000)
        service.tick()
    bodies = (tmp_path / "out.jsonl").read_bytes().splitlines()
    positions = []
    for body in bodies:
        assert len(body) <= CAP
        message = orjson.loads(body)
        VALIDATORS[schema_name(message)].validate(message)
        assert ("completion_tracking" in message) is tracked
        positions += [m["offset"] for m in message["members"]]
    assert sorted(positions) == list(range(400))  # every row in exactly one batch
    if limited:
        assert any("held_back_ms" in orjson.loads(b) for b in bodies)
    if not shape.is_reference:
        total = sum(orjson.loads(b)["aggregates"]["total"] for b in bodies)
        assert total == sum(range(400))  # one row per item: every event is the newest of its item


def test_an_event_that_can_never_fit_is_a_batch_of_its_own_and_dies_without_holding_back_the_others(
        store, clock, tmp_path):
    """docs/semantics.md 6a: the members around it are published; it alone is refused by the
    sink before sending, and after max_attempts it is a dead batch in the dead-letter destination."""
    from consolidator.services.flush import FlushService
    from consolidator.sinks.deadletter import FileDeadLetter
    from consolidator.sinks.file import FileSink

    shape = Shape(SPEC, full_payload=True)
    records = [record(i, value(i)) for i in range(6)]
    records[3] = record(3, orjson.dumps({**orjson.loads(value(3)), "blob": "z" * 3 * CAP}))
    names = FieldNames(shape=shape)
    store.ingest([decode(r, names, 1 << 20) for r in records], clock.now_ms())
    sink = FileSink(tmp_path / "out.jsonl", max_message_bytes=CAP)
    dead = FileDeadLetter(tmp_path / "dead.jsonl")
    service = FlushService(store=store, sink=sink, dead_letter=dead, clock=clock, max_attempts=2,
                           policy=Policy(debounce_ms=1000, hard_window_ms=1000, max_batch_bytes=CAP), names=names)
    for _ in range(4):
        clock.advance(30_000)
        service.tick()
    published = [m["offset"] for message in sink.read() for m in message["members"]]
    assert sorted(published) == [0, 1, 2, 4, 5]
    [entry] = dead.read()
    assert (entry["kind"], entry["attempts"]) == ("dead_batch", 2)
    assert "over the 4000-byte limit" in entry["detail"]
    assert [m["offset"] for m in entry["batch"]["members"]] == [3]
