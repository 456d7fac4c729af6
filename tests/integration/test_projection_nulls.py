"""A member payload that is a list of paths keeps an explicit null as null (docs/guide/events.md): an
absent path, or one through a value that is not an object, is left out. Through the real ingest
Lambda handler and the flush, and the same bytes on the streaming job's step."""

from __future__ import annotations

import json
import random
import time

from test_buffer_rules import MONTH_END, shared  # noqa: F401
from test_buffer_rules_shape import both_paths
from test_ingest import msk_event
from test_ingest_handler import load_handler

from consolidator.demo.lambda_context import LocalLambdaContext
from consolidator.rules.clock import ManualClock
from consolidator.rules.events import FieldNames, KafkaRecord
from consolidator.rules.policy import Policy
from consolidator.rules.shape import Shape, parse_outputs, parse_payload
from consolidator.services.flush import FlushService
from consolidator.sinks.deadletter import FileDeadLetter
from consolidator.sinks.file import FileSink
from consolidator.spark.step import job_step

SPEC = '[{"name": "n", "op": "count"}, {"name": "pages", "op": "distinct", "path": "props.page"}]'
PAYLOAD = '["props.page", "props.gone", "tags", "note.text", "lines"]'
SHAPE = Shape(parse_outputs(SPEC), *parse_payload(PAYLOAD))
NAMES = FieldNames(group_key="tenant", item_id="user", shape=SHAPE)
POLICY = Policy(debounce_ms=1_000, hard_window_ms=10_000, max_batch_size=10, tick_interval_ms=1_000)
EVENTS = [b'{"tenant": "T", "user": "u1", "props": {"page": null, "x": 1}, "tags": null, "note": null}',
          b'{"tenant": "T", "user": "u2", "props": {"page": "/a"}, "tags": ["a"], "note": "flat", "lines": null}']
EXPECTED = [{"props": {"page": None}, "tags": None}, {"props": {"page": "/a"}, "tags": ["a"], "lines": None}]


def test_a_projection_keeps_explicit_nulls_through_the_ingest_handler_and_the_flush(monkeypatch, database_url,
                                                                                   store, tmp_path):
    for name, value in {"DATABASE_URL": database_url, "DEAD_LETTER_URL": f"file://{tmp_path / 'dead.jsonl'}",
                        "AGGREGATE": SPEC, "MEMBER_PAYLOAD": PAYLOAD, "GROUP_KEY_FIELD": "tenant",
                        "ITEM_ID_FIELD": "user"}.items():
        monkeypatch.setenv(f"CONSOLIDATOR_{name}", value)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    now = int(time.time() * 1000)
    records = [KafkaRecord("events", 0, i, now, b"T", value) for i, value in enumerate(EVENTS)]
    assert load_handler("ingest").handler(msk_event(records), LocalLambdaContext()) == {"batchItemFailures": []}
    FlushService(store, FileSink(tmp_path / "out.jsonl"), FileDeadLetter(tmp_path / "flush-dead.jsonl"), POLICY,
                 ManualClock(now + 60_000), NAMES).tick()
    (message,) = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [m["event"] for m in message["members"]] == EXPECTED
    assert message["aggregates"] == {"n": 2, "pages": ["/a"]}  # a null counts for nothing


def test_the_streaming_step_keeps_the_same_nulls(shared):  # noqa: F811
    history = [KafkaRecord("events", 0, i, MONTH_END, b"T", value) for i, value in enumerate(EVENTS)]
    outcome = both_paths(shared, NAMES, history, POLICY, job_step(POLICY, NAMES, 1), 1, random.Random(0))
    outcome.check()
    (body,) = [body for *_, body in outcome.lambda_batches]
    assert [m["event"] for m in json.loads(body)["members"]] == EXPECTED
