"""CLI details an operator meets first: --version, Redis down is a failure, dry runs need only
the database, database errors say what to do, progress per tick, no wrapping when piped,
dead-letter entries written twice listed once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import MYSQL_HOST, MYSQL_PORT, REDIS_URL, record
from typer.testing import CliRunner

from consolidator.cli import app
from consolidator.rules.clock import SystemClock
from consolidator.rules.deadletter import poison_entry
from consolidator.rules.events import FieldNames, PoisonEvent, PoisonReason, decode
from consolidator.sinks.deadletter import FileDeadLetter
from consolidator.store.mysql import MySQLStore

runner = CliRunner()
NOW = SystemClock().now_ms()


@pytest.fixture
def env(database_url, monkeypatch) -> dict[str, str]:
    for name in list(os.environ):
        if name.startswith("CONSOLIDATOR_"):
            monkeypatch.delenv(name)
    return {"CONSOLIDATOR_DATABASE_URL": database_url}


@pytest.fixture
def migrated(env, database_url) -> MySQLStore:
    assert runner.invoke(app, ["db", "migrate"], env=env).exit_code == 0
    store = MySQLStore.from_url(database_url)
    yield store
    store.close()


def idle_rows(store: MySQLStore, group: str = "WH-1", n: int = 2) -> None:
    events = [decode(record(i, order=f"O{i}", location=group), FieldNames(), 256 * 1024) for i in range(n)]
    store.ingest(events, NOW - 600_000)


def flush_env(env: dict[str, str], tmp_path) -> dict[str, str]:
    return env | {"CONSOLIDATOR_REDIS_URL": REDIS_URL, "CONSOLIDATOR_SINK_URL": f"file://{tmp_path}/batches.jsonl",
                  "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{tmp_path}/dead-letter.jsonl",
                  "CONSOLIDATOR_EVENT_TTL_SECONDS": "0"}  # the rows carry a fixed, old record time


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == "consolidator 0.1.0"


def test_redis_unreachable_is_a_failure_with_the_redis_error(env, migrated, tmp_path):
    idle_rows(migrated)
    bad = flush_env(env, tmp_path) | {"CONSOLIDATOR_REDIS_URL": "redis://127.0.0.1:1/0"}
    result = runner.invoke(app, ["flush", "--once"], env=bad)
    assert result.exit_code == 1, result.output
    assert "Redis unreachable" in result.stderr
    assert "127.0.0.1:1" in result.stderr or "refused" in result.stderr.lower(), result.stderr
    assert migrated.row_counts() == {"PENDING": 2}, "nothing was flushed"


def test_dry_run_needs_only_the_database(env, migrated):
    idle_rows(migrated)
    result = runner.invoke(app, ["flush", "--dry-run", "--json"], env=env)  # no Redis, sink or dead letter
    assert result.exit_code == 0, result.output
    assert [(d["group_key"], d["reason"], d["pending"]) for d in json.loads(result.stdout)["due"]] == [("WH-1", "idle", 2)]


@pytest.mark.parametrize(("url", "says"), [
    (f"mysql://root:wrong-password@{MYSQL_HOST}:{MYSQL_PORT}/mysql", "fix CONSOLIDATOR_DATABASE_URL"),
    (f"mysql://root@{MYSQL_HOST}:{MYSQL_PORT}/consolidator_no_such_database", "consolidator db migrate"),
])
def test_database_errors_say_what_to_do(env, url, says):
    result = runner.invoke(app, ["status"], env=env | {"CONSOLIDATOR_DATABASE_URL": url})
    assert result.exit_code == 1
    assert says in result.stderr, result.stderr
    assert "wrong-password" not in result.output


def test_a_database_never_migrated_says_run_db_migrate(env):
    result = runner.invoke(app, ["status"], env=env)  # a database that was never migrated
    assert result.exit_code == 1
    assert "has schema version 0;" in result.stderr and "run `consolidator db migrate`" in result.stderr, result.stderr


def test_flush_seconds_prints_each_tick(env, migrated, tmp_path):
    idle_rows(migrated)
    settings = flush_env(env, tmp_path) | {"CONSOLIDATOR_TICK_INTERVAL_SECONDS": "0.5"}
    result = runner.invoke(app, ["flush", "--seconds", "2", "--json"], env=settings)
    assert result.exit_code == 0, result.output
    ticks = json.loads(result.stdout)["ticks"]
    lines = [line for line in result.stderr.splitlines() if line.startswith("tick ")]
    assert len(lines) == len(ticks) >= 2
    assert lines[0] == "tick 1: 1 published, 0 publish failures, 0 expired, 0 throttled, 0 dead"
    assert lines[1] == "tick 2: 0 published, 0 publish failures, 0 expired, 0 throttled, 0 dead"


def test_piped_output_is_not_wrapped_at_80_columns(env, migrated):
    group = "WAREHOUSE-" + "X" * 120
    idle_rows(migrated, group=group)
    result = runner.invoke(app, ["status"], env=env)
    assert result.exit_code == 0
    assert any(group in line for line in result.stdout.splitlines()), result.stdout


def test_dlq_list_shows_an_entry_written_twice_once_with_a_count(env, migrated, tmp_path):
    path = tmp_path / "dead-letter.jsonl"
    poison = record(7, value=b"not json")
    error = PoisonEvent(PoisonReason.NOT_JSON, "expected a JSON object")
    dead_letter = FileDeadLetter(path)
    # a retried partition dead-letters its poison again, a minute later
    assert dead_letter.send([poison_entry(poison, error, NOW)]) == set()
    assert dead_letter.send([poison_entry(poison, error, NOW + 60_000), poison_entry(record(8, value=b"[]"), error, NOW)]) == set()
    settings = env | {"CONSOLIDATOR_DEAD_LETTER_URL": f"file://{path}"}

    listed = json.loads(runner.invoke(app, ["dlq", "list", "--json"], env=settings).stdout)["entries"]
    assert [(e["idempotency_key"], e["count"]) for e in listed] == [("poison:orders:0:7", 2), ("poison:orders:0:8", 1)]
    human = runner.invoke(app, ["dlq", "list"], env=settings)
    assert human.exit_code == 0 and "2x" in human.stdout


@pytest.mark.parametrize(("args", "says"), [
    (["replay", "--out", "OUT"], "--input is required"),
    (["replay", "--out", "OUT", "--input", "no-such-file.jsonl"], "does not exist"),
    (["replay", "--out", "OUT", "--input", "IN", "--format", "csv"],
     "cannot replay: --format is one of auto, values, envelope, msk-event, json, parquet, kafka"),
    (["replay", "--out", "OUT", "--input", "IN", "--debounce-seconds", "0"],
     "--debounce-seconds: Input should be greater than or equal to 0.001"),
    (["stream", "--bootstrap-servers", "b:9092", "--topic", "t", "--checkpoint", "c",
      "--sink-url", "ftp://x/y", "--dead-letter-url", "file:///tmp/d.jsonl"], "--sink-url"),
    (["stream", "--bootstrap-servers", "b:9092", "--topic", "t", "--checkpoint", "c",
      "--sink-url", "file:///tmp/b.jsonl", "--dead-letter-url", "file:///tmp/d.jsonl",
      "--debounce-seconds", "-5"], "'--debounce-seconds': -5 is out of range: allowed 0.001 <= x <= 2678400"),
    (["stream", "--bootstrap-servers", "b:9092", "--topic", "t", "--checkpoint", "c",
      "--sink-url", "file:///tmp/b.jsonl", "--dead-letter-url", "file:///tmp/d.jsonl",
      "--max-batch-bytes", "2000000"], "over the sink's per-message limit (1000000 bytes)"),
])
def test_spark_commands_check_their_inputs_before_starting_spark(args, says, tmp_path):
    """With no Java to start, a check that came after Spark's start would fail on Java instead."""
    pytest.importorskip("pyspark")
    (tmp_path / "IN").write_text("")
    run = subprocess.run(
        [sys.executable, "-c", "from consolidator.cli import app; app()", "spark", *args],
        check=False, cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("CONSOLIDATOR_")}
        | {"JAVA_HOME": str(tmp_path / "no-java"), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 2, run.stderr[-2000:]
    assert says in run.stderr
    assert "Traceback" not in run.stderr and "Java" not in run.stderr
