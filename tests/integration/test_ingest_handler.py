"""The real Lambda handler, loaded from functions/ingest, with the sample events of events/."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from support import sql

from consolidator.demo.lambda_context import LocalLambdaContext
from consolidator.rules.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]


def load_handler(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_handler_under_test", ROOT / "functions" / name / "handler.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def handler_env(monkeypatch, database_url, store, tmp_path):
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_URL", database_url)
    monkeypatch.setenv("CONSOLIDATOR_DEAD_LETTER_URL", f"file://{tmp_path}/dead-letter.jsonl")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    return tmp_path / "dead-letter.jsonl"


def test_handler_stores_sample_event_and_dead_letters_the_poison_mix(handler_env, store):
    module = load_handler("ingest")
    orders = json.loads((ROOT / "events" / "msk-orders.json").read_text())
    assert module.handler(orders, LocalLambdaContext()) == {"batchItemFailures": []}
    marks = sql(store, "SELECT src_partition, high_water FROM partition_offsets ORDER BY src_partition")
    assert marks == [{"src_partition": p, "high_water": 103} for p in (0, 1, 2)]

    mix = json.loads((ROOT / "events" / "msk-poison-mix.json").read_text())
    assert module.handler(mix, LocalLambdaContext()) == {"batchItemFailures": []}
    reasons = [json.loads(line)["reason"] for line in handler_env.read_text().splitlines()]
    assert reasons == ["not_utf8", "not_json", "not_object", "missing_group_key", "missing_item_id",
                       "bad_items", "bad_quantity"]
    stored = {r["item_id"] for r in sql(store, "SELECT item_id FROM buffer_rows")}
    assert {"A900", "A904"} <= stored


def test_handler_names_the_bad_variable_when_it_starts(handler_env, monkeypatch):
    monkeypatch.setenv("CONSOLIDATOR_MAX_EVENT_BYTES", "-3")
    module = load_handler("ingest")
    with pytest.raises(ConfigurationError, match="CONSOLIDATOR_MAX_EVENT_BYTES"):
        module.handler(json.loads((ROOT / "events" / "msk-orders.json").read_text()), LocalLambdaContext())
