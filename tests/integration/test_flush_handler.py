"""The real flush handler, loaded from functions/flush, with env settings and a local context."""

from __future__ import annotations

import importlib.util
import json
import logging
import time
from pathlib import Path

import pytest
import redis
from support import LOCK_KEY, REDIS_URL, record
from test_flush import VALIDATOR, ingest

from consolidator.demo.lambda_context import LocalLambdaContext
from consolidator.rules.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]


def load_handler():
    spec = importlib.util.spec_from_file_location("flush_handler_under_test", ROOT / "functions/flush/handler.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def flush_env(monkeypatch, database_url, tmp_path):
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_URL", database_url)
    monkeypatch.setenv("CONSOLIDATOR_REDIS_URL", REDIS_URL)
    monkeypatch.setenv("CONSOLIDATOR_SINK_URL", f"file://{tmp_path}/batches.jsonl")
    monkeypatch.setenv("CONSOLIDATOR_DEAD_LETTER_URL", f"file://{tmp_path}/dead-letter.jsonl")
    monkeypatch.setenv("CONSOLIDATOR_TICK_INTERVAL_SECONDS", "0.25")
    monkeypatch.setenv("CONSOLIDATOR_LOCK_TTL_SECONDS", "5")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Consolidator")
    yield tmp_path / "batches.jsonl"
    redis.Redis.from_url(REDIS_URL).delete(LOCK_KEY)


def test_handler_ticks_until_the_invocation_ends_and_publishes_due_groups(flush_env, store, clock, capsys):
    clock.set(time.time_ns() // 1_000_000 - 400_000)  # ingested 400 s ago: idle (debounce 300 s)
    ingest(store, clock, [record(i, location=f"WH-{i % 2}", order=f"O{i}", timestamp_ms=clock.now_ms())
                          for i in range(6)])  # fresh records: the default 6 h event TTL keeps them
    records: list[logging.LogRecord] = []
    collector = logging.Handler(logging.INFO)
    collector.emit = records.append
    flush_log = logging.getLogger("consolidator.services.flush")
    flush_log.addHandler(collector)
    module = load_handler()
    flush_log.setLevel(logging.INFO)
    started = time.monotonic()
    try:
        result = module.handler({}, LocalLambdaContext(timeout_ms=2_000))
    finally:
        flush_log.removeHandler(collector)
    elapsed = time.monotonic() - started
    assert result["published"] == 2 and result["dead"] == 0 and result["publish_failures"] == 0
    assert 4 <= result["ticks"] <= 8, result  # every 0.25 s, stopping before the deadline
    assert elapsed < 2.0
    messages = [json.loads(line) for line in flush_env.read_text().splitlines()]
    for message in messages:
        VALIDATOR.validate(message)
    assert sorted(m["group_key"] for m in messages) == ["WH-0", "WH-1"]
    assert store.row_counts() == {"SENT": 6}
    logs = capsys.readouterr().out
    assert '"BatchesFlushed"' in logs, "Powertools metrics are emitted (EMF)"
    assert_emf_is_the_catalogue(logs, {"BatchesFlushed", "EventToPublishLatency", "OldestPendingAge"})
    published_logs = [r for r in records if r.getMessage() == "batch published"]
    assert sorted(r.batch_id for r in published_logs) == sorted(m["batch_id"] for m in messages)


def assert_emf_is_the_catalogue(output: str, expected: set[str]) -> None:
    """Every metric in the EMF lines of ``output`` is in the one list of metrics under the same
    name and unit (so the worker's ``/metrics`` serves it as the same metric), among them ``expected``."""
    from consolidator.services.metrics import BY_NAME

    emitted = {}
    for line in output.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            for directive in json.loads(line)["_aws"]["CloudWatchMetrics"]:
                emitted |= {m["Name"]: m["Unit"] for m in directive["Metrics"]}
    assert expected <= set(emitted), emitted
    assert {name: unit for name, unit in emitted.items()
            if name not in BY_NAME or BY_NAME[name].unit != unit} == {}, "EMF metrics not in METRICS as emitted"


def test_handler_names_the_bad_variable(flush_env, monkeypatch):
    monkeypatch.setenv("CONSOLIDATOR_SINK_URL", "ftp://nowhere/x")
    with pytest.raises(ConfigurationError, match="CONSOLIDATOR_SINK_URL"):
        load_handler().handler({}, LocalLambdaContext(timeout_ms=1_000))
