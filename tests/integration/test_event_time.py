"""An event's own time (``CONSOLIDATOR_EVENT_TIME_FIELD``) on every path: it drives the TTL, the
buffer's month and the batch's event times; a value without a readable one is poison
(``bad_event_time``, the detail naming the path). Through the real ingest handler, ``ingest
--file`` and ``flush --once``, and the streaming job's step against the Lambda path."""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime
from pathlib import Path

import test_cli
from support import sql
from test_buffer_rules import MONTH_END, shared  # noqa: F401
from test_buffer_rules_shape import both_paths
from test_cli import cli, cli_json
from test_ingest import msk_event
from test_ingest_handler import load_handler

from consolidator.demo.lambda_context import LocalLambdaContext
from consolidator.rules.batch import iso_ms
from consolidator.rules.events import FieldNames, KafkaRecord
from consolidator.rules.policy import Policy
from consolidator.spark.step import job_step

env, flush_env, migrated = test_cli.env, test_cli.flush_env, test_cli.migrated  # fixtures
HOUR = 3_600_000


def value(group: str, item: str, **extra) -> str:
    return json.dumps({"location_id": group, "order_id": item, "items": [{"sku": "S", "quantity": 1}], **extra})


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_event_time_drives_the_ttl_and_the_batch_times_through_ingest_file_and_flush(flush_env, migrated,
                                                                                           tmp_path):
    timed = flush_env | {"CONSOLIDATOR_EVENT_TIME_FIELD": "ts", "CONSOLIDATOR_EVENT_TTL_SECONDS": "3600",
                         "CONSOLIDATOR_DEBOUNCE_SECONDS": "0.001"}
    now = int(time.time() * 1000) // 1000 * 1000
    path = tmp_path / "notifications.jsonl"
    path.write_text("\n".join([
        value("C-1", "n1", ts=iso(now - 48 * HOUR)),   # 48 hours old: over the one-hour TTL
        value("C-1", "n2", ts=now - 120_000),          # two minutes old, epoch ms
        value("C-2", "n3", ts=iso(now - 60_000)),
        value("C-2", "n4"),                            # no event time: poison
        value("C-2", "n5", ts="2026-11-28T10:00:00"),  # no zone: poison
    ]) + "\n")
    report = cli_json(timed, "ingest", "--file", str(path))
    assert (report["stored"], report["poison"]) == (3, 2)
    dead = lines(tmp_path / "dead-letter.jsonl")
    assert [(e["source"]["offset"], e["reason"]) for e in dead] == [(4, "bad_event_time"), (5, "bad_event_time")]
    assert "'ts' is missing" in dead[0]["detail"] and "needs a zone" in dead[1]["detail"]

    result = cli(timed, "flush", "--once")
    assert result.exit_code == 0, result.output
    assert "2 batches published, 0 publish failures, 1 expired" in result.stdout
    (expired,) = [e for e in lines(tmp_path / "dead-letter.jsonl") if e["reason"] == "expired"]
    assert expired["record_ts_ms"] == now - 48 * HOUR
    batches = {b["group_key"]: b for b in lines(tmp_path / "batches.jsonl")}
    assert (batches["C-1"]["first_event_at"], batches["C-1"]["last_event_at"]) == (iso_ms(now - 120_000),) * 2
    assert batches["C-2"]["first_event_at"] == iso_ms(now - 60_000)


def test_the_ingest_handler_stores_the_event_time_and_dead_letters_a_bad_one(monkeypatch, database_url, store,
                                                                            tmp_path):
    for name, setting in {"DATABASE_URL": database_url, "DEAD_LETTER_URL": f"file://{tmp_path / 'dead.jsonl'}",
                          "EVENT_TIME_FIELD": "meta.at"}.items():
        monkeypatch.setenv(f"CONSOLIDATOR_{name}", setting)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    now = int(time.time() * 1000)
    values = [value("C-1", "a", meta={"at": "2026-11-28T10:00:00+01:00"}), value("C-1", "b", meta="x")]
    records = [KafkaRecord("events", 0, i, now, b"C-1", v.encode()) for i, v in enumerate(values)]
    assert load_handler("ingest").handler(msk_event(records), LocalLambdaContext()) == {"batchItemFailures": []}
    stored = sql(store, "SELECT item_id, record_ts_ms FROM buffer_rows")
    assert [(r["item_id"], r["record_ts_ms"]) for r in stored] == [
        ("a", int(datetime(2026, 11, 28, 9, tzinfo=UTC).timestamp() * 1000))]
    (entry,) = lines(tmp_path / "dead.jsonl")
    assert entry["reason"] == "bad_event_time" and entry["detail"].startswith("meta.at: meta is not a JSON object")


def test_the_streaming_step_expires_late_events_as_the_lambda_path_does(shared):  # noqa: F811
    names = FieldNames(event_time=("ts",))
    policy = Policy(debounce_ms=1_000, hard_window_ms=10_000, max_batch_size=10, tick_interval_ms=1_000,
                    ttl_ms=HOUR)
    rng = random.Random(3)
    history = []
    for offset in range(40):
        arrival = MONTH_END - 20_000 + offset * 1_000  # the month changes half way
        lag = rng.choice([0, 5_000, 30 * 60_000, 48 * HOUR])
        extra = {} if offset % 13 == 12 else {"ts": iso(arrival - lag) if offset % 2 else arrival - lag}
        history.append(KafkaRecord("events", 0, offset, arrival, b"k",
                                   value(f"C-{offset % 3}", f"n{offset % 7}", **extra).encode()))
    outcome = both_paths(shared, names, history, policy, job_step(policy, names, 2), 2, random.Random(0))
    outcome.check()
    assert outcome.lambda_batches and outcome.lambda_expired
    assert outcome.lambda_poison and all("bad_event_time" in str(p) for p in outcome.lambda_poison)
