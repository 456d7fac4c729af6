"""The worked examples of docs/guide/events.md, each run end to end as a user would: its settings file
and its input through ``consolidator ingest --file`` and ``consolidator flush --once`` on the
real database, the batches read from the file sink."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import jsonschema
import pytest
from support import REDIS_URL
from test_cli import cli, cli_json

from consolidator.rules.batch import load_schema, schema_name

ROOT = Path(__file__).resolve().parents[2]
PAGE_SLEEP_S = 2  # docs/guide/events.md waits this long before `flush --once`
WAIT_S = 1.2  # what the test waits instead: every example's CONSOLIDATOR_DEBOUNCE_SECONDS (1) + 0.2


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
    ingested = cli_json(env, "ingest", "--file", f"examples/{name}/{name}.jsonl")
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
    """The new user's path end to end: a tenant-shaped JSON-lines file through
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
    assert shown["aggregates"] == acme["aggregates"]  # what the message computed, from the batch's rows
    assert (shown["attempts"], shown["failed_publishes"]) == (1, 0)  # published at its first attempt
    listed = {b["group_key"]: b for b in cli_json(env, "batch", "list")["batches"]}
    assert {g: (b["aggregates"], b["attempts"]) for g, b in listed.items()} == {
        g: (m["aggregates"], 1) for g, m in by_tenant.items()}
    human = cli(env, "batch", "show", acme["batch_id"])
    assert "1 publish attempt(s) (0 failed)" in human.stdout
    assert 'aggregates: {"users": 2, "kinds": ["click", "purchase"], "first_seen_event": "click"}' in human.stdout
    assert '{"users":2,"kinds":["click","purchase"],"first_seen_event...' in cli(env, "batch", "list").stdout


def test_sensor_readings_min_max_count_per_device(example):
    batches, dead, _ = example("sensors")
    by_device = {m["group_key"]: m["aggregates"] for m in batches}
    assert by_device == {"boiler-1": {"readings": 3, "low": 58.75, "high": 64, "latest": 58.75},
                         "fridge-3": {"readings": 2, "low": 3.5, "high": 4.25, "latest": 3.5}}
    assert [(d["reason"], d["detail"]) for d in dead] == [("bad_value", "reading.celsius: expected number, got string")]


def test_the_orders_reference(example):
    batches, dead, env = example("orders")
    by_warehouse = {m["group_key"]: m for m in batches}
    for message in batches:  # the reference shape: the message's items, under the default output's name
        assert cli_json(env, "batch", "show", message["batch_id"])["aggregates"] == {"items": message["items"]}
    assert by_warehouse["WH-1"]["schema_version"] == 1
    assert by_warehouse["WH-1"]["items"] == [{"sku": "SKU-1", "quantity": 8}]  # A001's newest event counts
    assert by_warehouse["WH-1"]["item_ids"] == ["A001", "A002"] and by_warehouse["WH-1"]["event_count"] == 3
    assert by_warehouse["WH-2"]["items"] == [{"sku": "SKU-9", "quantity": 1}]
    assert [d["reason"] for d in dead] == ["bad_quantity"]


def doc_commands() -> list[str]:
    """The shell commands of docs/guide/events.md's Examples section (its one code block)."""
    section = (ROOT / "docs" / "guide" / "events.md").read_text().split("## Examples", 1)[1]
    return section.split("```\n", 2)[1].strip().splitlines()


def test_the_doc_commands_run_as_written_for_every_example_on_one_database(tmp_path):
    """docs/guide/events.md's commands, as a user types them from the root of a clean clone after
    `make setup` (the examples and the .venv, nothing else): for each example in turn (its name
    in place of `sensors`), on one new database that `db migrate --create` makes, with no
    CONSOLIDATOR_* variable beforehand. Every command succeeds, no example's lines are taken
    for another's (each is stored, none replayed), and each writes its batches. Only the
    database name and the Redis address differ from the page."""
    import uuid

    import pymysql
    from support import MYSQL_HOST, MYSQL_PASSWORD, MYSQL_PORT, MYSQL_USER

    commands = doc_commands()
    assert commands[0] == "export CONSOLIDATOR_DATABASE_URL=mysql://root@127.0.0.1:3306/consolidator_examples"
    assert commands[1] == "export CONSOLIDATOR_REDIS_URL=redis://127.0.0.1:6379/0"
    assert ".venv/bin/consolidator db migrate --create" in commands
    assert f"sleep {PAGE_SLEEP_S}; .venv/bin/consolidator flush --once" in commands
    database = f"consolidator_test_{uuid.uuid4().hex[:10]}"  # made by the page's db migrate --create
    server = f"mysql://{MYSQL_USER}:{MYSQL_PASSWORD}@{MYSQL_HOST}:{MYSQL_PORT}"
    commands[:2] = [f"export CONSOLIDATOR_DATABASE_URL={server}/{database}", f"export CONSOLIDATOR_REDIS_URL={REDIS_URL}"]
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / ".venv").symlink_to(ROOT / ".venv")
    shutil.copytree(ROOT / "examples", clone / "examples")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CONSOLIDATOR_")}
    try:
        for name in ("latest-per-user", "sensors", "orders"):  # the page's order: sensors is not first
            settings = (ROOT / "examples" / name / "settings.env").read_text()
            assert "\nCONSOLIDATOR_DEBOUNCE_SECONDS=1\n" in settings, name  # WAIT_S is past it
            # The page's `sleep 2` waits out the examples' 1 s debounce with room to spare; a
            # shorter wait past the debounce that works proves the page's longer one does too
            script = "\n".join(["set -e", *(c.replace("sensors", name).replace(f"sleep {PAGE_SLEEP_S};", f"sleep {WAIT_S};")
                                             for c in commands)])
            assert f"sleep {WAIT_S};" in script
            done = subprocess.run(["bash", "-c", script], cwd=clone, env=environ, capture_output=True, text=True,
                                  timeout=300, check=False)
            assert done.returncode == 0, (name, done.stdout, done.stderr)
            summary = next(line for line in done.stdout.splitlines() if f"as topic file.{name}:" in line)
            assert " 0 replayed," in summary and " 0 stored," not in summary, summary
            assert "nothing new" not in done.stderr, done.stderr
            batches = [json.loads(line) for line in (clone / "out" / f"{name}.jsonl").read_text().splitlines()]
            assert batches and all("batch_id" in b for b in batches), name
            assert '"batch_id"' in done.stdout  # the page's `cat` shows them
    finally:
        with pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user=MYSQL_USER, password=MYSQL_PASSWORD,
                             autocommit=True) as connection, connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {database}")  # the page's command created it
