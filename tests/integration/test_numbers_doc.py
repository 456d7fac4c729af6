"""Every example of docs/guide/events.md, "Numbers", as the page writes it (``numbers_doc`` reads the
table): through the real ingest Lambda handler, alone and beside a poison neighbour in the same
invocation, then the flush; and through the streaming job's step
beside the Lambda path, which must give the same bytes. Integers are classified by their literal
on every path: ``-9223372036854775809`` and ``100000000000000000000`` are poison, never doubles."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
from numbers_doc import NAMES, SPEC, Example, examples, totals
from test_buffer_rules import MONTH_END, shared  # noqa: F401
from test_buffer_rules_shape import both_paths
from test_ingest import msk_event
from test_ingest_handler import load_handler

from consolidator.demo.lambda_context import LocalLambdaContext
from consolidator.rules.clock import ManualClock
from consolidator.rules.events import KafkaRecord
from consolidator.rules.policy import Policy
from consolidator.services.flush import FlushService
from consolidator.sinks.deadletter import FileDeadLetter
from consolidator.sinks.file import FileSink
from consolidator.spark.step import job_step

POLICY = Policy(debounce_ms=1_000, hard_window_ms=10_000, max_batch_size=100, tick_interval_ms=1_000)
EXAMPLES = examples()


def _in_claim_order(bodies: list[bytes]) -> list[bytes]:
    return sorted(bodies, key=lambda body: json.loads(body)["members"][0]["offset"])


def _handler(monkeypatch, database_url: str, dead: Path, spec: str):
    """The real ingest Lambda handler under ``spec``, dead letters to ``dead``."""
    for name, value in {"DATABASE_URL": database_url, "DEAD_LETTER_URL": f"file://{dead}", "AGGREGATE": spec,
                        "GROUP_KEY_FIELD": "tenant", "ITEM_ID_FIELD": "user"}.items():
        monkeypatch.setenv(f"CONSOLIDATOR_{name}", value)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    return load_handler("ingest").handler


@pytest.mark.parametrize("path", ["alone", "beside_poison"])
@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_the_example_through_the_ingest_handler_and_the_flush(example: Example, path, monkeypatch, database_url,
                                                              store, tmp_path):
    dead = tmp_path / "dead.jsonl"
    handler = _handler(monkeypatch, database_url, dead, SPEC)
    now = int(time.time() * 1000)
    records = example.records("T", timestamp_ms=now)
    if path == "beside_poison":  # one bad record never fails its neighbours
        records.append(KafkaRecord("events", 1, 0, now, b"T", b"[]"))
    response = handler(msk_event(records), LocalLambdaContext())
    assert response == {"batchItemFailures": []}

    entries = [json.loads(line) for line in dead.read_text().splitlines()] if dead.exists() else []
    poison = [(e["source"]["partition"], e["reason"]) for e in entries]
    if path == "beside_poison":
        assert poison.pop() == (1, "not_object")
    sink = FileSink(tmp_path / "out.jsonl")
    FlushService(store, sink, FileDeadLetter(tmp_path / "flush-dead.jsonl"), POLICY,
                 ManualClock(now + 60_000), NAMES).tick()
    published = [line.encode() for line in (tmp_path / "out.jsonl").read_text().splitlines()] \
        if (tmp_path / "out.jsonl").exists() else []
    if example.poison is not None:
        assert poison == [(0, example.poison)] * len(example.literals) and published == []
    else:
        assert poison == [] and totals(_in_claim_order(published)) == example.totals


@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_the_example_gives_the_same_bytes_on_the_streaming_step_as_on_the_lambda_path(example: Example,
                                                                                      shared):  # noqa: F811
    history = example.records("T", timestamp_ms=MONTH_END)
    outcome = both_paths(shared, NAMES, history, POLICY, job_step(POLICY, NAMES, 1), 1, random.Random(0))
    outcome.check()
    if example.poison is not None:
        assert [reason for reason, *_ in outcome.lambda_poison] == [example.poison] * len(example.literals)
    else:
        assert totals(_in_claim_order([body for *_, body in outcome.lambda_batches])) == example.totals


@pytest.mark.parametrize("path", ["alone", "beside_poison"])
def test_a_group_sum_past_the_double_range_in_one_event_is_poison_naming_its_element(path, monkeypatch, database_url,
                                                                                   store, tmp_path):
    """One event whose lines sum past the double range for one sku: poison at ingest with the
    element in the reason, its neighbour stored; the handler answers, it never raises."""
    dead = tmp_path / "dead.jsonl"
    handler = _handler(monkeypatch, database_url, dead,
                       '[{"name": "amounts", "op": "group_sum", "path": "lines", "by": "sku", "sum": ["amt"]}]')
    now = int(time.time() * 1000)
    records = [KafkaRecord("events", 0, 0, now, b"T", b'{"tenant": "T", "user": "u1", "lines": ['
                           b'{"sku": "a", "amt": 1.7e308}, {"sku": "a", "amt": 1.7e308}]}'),
               KafkaRecord("events", 0, 1, now, b"T", b'{"tenant": "T", "user": "u2", "lines": [{"sku": "a", "amt": 2}]}')]
    if path == "beside_poison":
        records.append(KafkaRecord("events", 1, 0, now, b"T", b"[]"))
    assert handler(msk_event(records), LocalLambdaContext()) == {"batchItemFailures": []}
    entries = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [(e["source"]["offset"], e["reason"], e["detail"]) for e in entries if e["source"]["partition"] == 0] == [
        (0, "bad_value", ("lines[1].amt: expected sums per group within the double range (a batch of this event"
                         " alone adds them up), got a sum beyond 1.8e308"))]
    assert store.row_counts() == {"PENDING": 1}
