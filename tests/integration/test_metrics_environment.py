"""Metrics carry the environment dimension the alarms select on (CONSOLIDATOR_ENVIRONMENT)."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest
import redis
from support import LOCK_KEY, REDIS_URL, record

from consolidator.demo.lambda_context import LocalLambdaContext
from consolidator.rules.events import FieldNames, decode

ROOT = Path(__file__).resolve().parents[2]


def load(function: str):
    spec = importlib.util.spec_from_file_location(f"{function}_handler_env_test", ROOT / f"functions/{function}/handler.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def emf_documents(text: str) -> list[dict]:
    return [doc for line in text.splitlines() if line.startswith("{") and "_aws" in (doc := json.loads(line))]


@pytest.fixture
def env(monkeypatch, database_url, tmp_path, store):
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_URL", database_url)
    monkeypatch.setenv("CONSOLIDATOR_REDIS_URL", REDIS_URL)
    monkeypatch.setenv("CONSOLIDATOR_SINK_URL", f"file://{tmp_path}/batches.jsonl")
    monkeypatch.setenv("CONSOLIDATOR_DEAD_LETTER_URL", f"file://{tmp_path}/dead-letter.jsonl")
    monkeypatch.setenv("CONSOLIDATOR_TICK_INTERVAL_SECONDS", "0.25")
    monkeypatch.setenv("CONSOLIDATOR_LOCK_TTL_SECONDS", "5")
    monkeypatch.setenv("CONSOLIDATOR_COMPLETION_SINK_URL", f"file://{tmp_path}/completions.jsonl")
    monkeypatch.setenv("CONSOLIDATOR_ENVIRONMENT", "staging")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    yield
    redis.Redis.from_url(REDIS_URL).delete(LOCK_KEY)


@pytest.mark.parametrize(("function", "event", "metric"), [
    ("flush", {}, "BatchesFlushed"),
    ("ingest", json.loads((ROOT / "events/msk-orders.json").read_text()), "RecordsIngested"),
    ("acks", {"source": "aws.events", "detail-type": "Scheduled Event"}, "IncompleteBatches"),
])
def test_every_metric_carries_the_environment_dimension(env, store, capsys, function, event, metric):
    now_ms = time.time_ns() // 1_000_000
    events = [decode(record(i, order=f"O{i}", timestamp_ms=now_ms), FieldNames(), 256 * 1024) for i in range(100, 103)]
    store.ingest(events, now_ms - 400_000)  # idle: due for the flush (and fresh: not past the event TTL)
    module = load(function)
    module.handler(event, LocalLambdaContext(timeout_ms=1_500))
    documents = emf_documents(capsys.readouterr().out)
    assert documents, "Powertools emitted metrics"
    for doc in documents:
        assert doc["environment"] == "staging"
        assert all("environment" in dims for dims in doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"])
    assert any(metric in doc for doc in documents)


def test_environment_setting_is_checked(monkeypatch, database_url):
    from consolidator.rules.errors import ConfigurationError
    from consolidator.settings import CleanupSettings, load_settings

    monkeypatch.setenv("CONSOLIDATOR_DATABASE_URL", database_url)
    monkeypatch.setenv("CONSOLIDATOR_ENVIRONMENT", "Prod Env!")
    with pytest.raises(ConfigurationError, match="CONSOLIDATOR_ENVIRONMENT"):
        load_settings(CleanupSettings)
