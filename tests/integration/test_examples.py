"""The worked examples of docs/events.md, each run end to end as a user would: its settings file
and its input through ``consolidator ingest --file`` and ``consolidator flush --once`` on the
real database, the batches read from the file sink (issue 22)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import jsonschema
import pytest
from support import REDIS_URL
from test_cli import cli_json

from consolidator.rules.batch import load_schema, schema_name

ROOT = Path(__file__).resolve().parents[2]


def run_example(name: str, database_url: str, tmp_path: Path, monkeypatch) -> tuple[list[dict], list[dict], dict]:
    """The example's batches and dead-letter entries, as its README steps produce them, and the
    environment the commands ran with."""
    for variable in [v for v in os.environ if v.startswith("CONSOLIDATOR_")]:
        monkeypatch.delenv(variable)
    monkeypatch.chdir(ROOT)  # the settings name their spec files relative to the repository root
    settings = {}
    for line in (ROOT / "examples" / name / "settings.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            variable, _, value = line.partition("=")
            settings[variable] = value
    env = settings | {"CONSOLIDATOR_DATABASE_URL": database_url, "CONSOLIDATOR_REDIS_URL": REDIS_URL,
                      "CONSOLIDATOR_SINK_URL": f"file://{tmp_path / 'batches.jsonl'}",
                      "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{tmp_path / 'dead.jsonl'}"}
    ingested = cli_json(env, "ingest", "--file", f"examples/{name}/events.jsonl")
    assert ingested["failed"] == 0
    time.sleep(float(settings["CONSOLIDATOR_DEBOUNCE_SECONDS"]) + 0.2)  # the groups go idle
    flushed = cli_json(env, "flush", "--once")
    assert flushed["publish_failures"] == 0
    read = [json.loads(line) for path in ("batches.jsonl", "dead.jsonl") if (tmp_path / path).exists()
            for line in (tmp_path / path).read_text().splitlines()]
    batches = [m for m in read if "batch_id" in m and "kind" not in m]
    for message in batches:
        jsonschema.Draft202012Validator(load_schema(schema_name(message)),
                                        format_checker=jsonschema.FormatChecker()).validate(message)
    return batches, [m for m in read if "kind" in m], env


@pytest.fixture
def example(store, database_url, tmp_path, monkeypatch):
    return lambda name: run_example(name, database_url, tmp_path, monkeypatch)


def test_latest_event_per_user_per_tenant(example):
    """The new user's path end to end (issue 25): a tenant-shaped JSON-lines file through
    ``ingest --file`` and ``flush --once``, then ``batch show`` of what was published."""
    batches, dead, env = example("latest-per-user")
    by_tenant = {m["group_key"]: m for m in batches}
    assert dead == [] and set(by_tenant) == {"acme", "globex"}
    acme = by_tenant["acme"]
    assert acme["schema_version"] == 2 and acme["event_count"] == 4
    assert acme["aggregates"] == {"users": 2, "kinds": ["click", "purchase"], "first_seen_event": "click"}
    assert [(m["item_id"], m["event"]["event"]) for m in acme["members"]] == [("u1", "click"), ("u2", "purchase")]
    assert acme["members"][1]["event"]["props"] == {"amount": 49.5}  # the event itself, not base64
    assert [m["item_id"] for m in by_tenant["globex"]["members"]] == ["u7", "42"]  # 42: its decimal text

    shown = cli_json(env, "batch", "show", acme["batch_id"])
    assert (shown["group_key"], shown["state"], shown["tracked"]) == ("acme", "SENT", False)
    assert [(m["item_id"], m["offset"], m["event"]) for m in shown["members"]] == [
        (m["item_id"], m["offset"], m["event"]) for m in acme["members"]]


def test_sensor_readings_min_max_count_per_device(example):
    batches, dead, _ = example("sensors")
    by_device = {m["group_key"]: m["aggregates"] for m in batches}
    assert by_device == {"boiler-1": {"readings": 3, "low": 58.75, "high": 64, "latest": 58.75},
                         "fridge-3": {"readings": 2, "low": 3.5, "high": 4.25, "latest": 3.5}}
    assert [(d["reason"], d["detail"]) for d in dead] == [("bad_value", "reading.celsius: expected number, got string")]


def test_the_orders_reference(example):
    batches, dead, _ = example("orders")
    by_warehouse = {m["group_key"]: m for m in batches}
    assert by_warehouse["WH-1"]["schema_version"] == 1
    assert by_warehouse["WH-1"]["items"] == [{"sku": "SKU-1", "quantity": 8}]  # A001's newest event counts
    assert by_warehouse["WH-1"]["item_ids"] == ["A001", "A002"] and by_warehouse["WH-1"]["event_count"] == 3
    assert by_warehouse["WH-2"]["items"] == [{"sku": "SKU-9", "quantity": 1}]
    assert [d["reason"] for d in dead] == ["bad_quantity"]
