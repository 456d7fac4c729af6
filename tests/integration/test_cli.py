"""The operator CLI against the real database (typer's test runner, and a subprocess for the
lazy Spark sub-app)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROWS, STATE, record, sql
from typer.testing import CliRunner

from consolidator.cli import app
from consolidator.rules.clock import SystemClock
from consolidator.rules.events import FieldNames, bucket_of, decode, months_after
from consolidator.store.mysql import MySQLStore
from consolidator.store.schema import _migrations

runner = CliRunner()
NOW = SystemClock().now_ms()
MONTH = bucket_of(NOW)
LAST_MONTH_MS = NOW - 40 * 86_400_000  # a timestamp in an earlier month's partition
VERSIONS = [version for version, _, _ in _migrations(MONTH, "utf8mb4_bin")]  # every migration, in order


@pytest.fixture
def env(database_url, tmp_path, monkeypatch) -> dict[str, str]:
    for name in list(os.environ):
        if name.startswith("CONSOLIDATOR_"):
            monkeypatch.delenv(name)
    values = {
        "CONSOLIDATOR_DATABASE_URL": database_url,
        "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{tmp_path / 'dead-letter.jsonl'}",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)  # also for services built in-process by the tests
    return values


def cli(env: dict[str, str], *args: str):
    return runner.invoke(app, list(args), env=env)


def cli_json(env: dict[str, str], *args: str, exit_code: int = 0) -> dict:
    result = cli(env, *args, "--json")
    assert result.exit_code == exit_code, (result.stdout, result.stderr)
    return json.loads(result.stdout)


@pytest.fixture
def migrated(env, database_url) -> MySQLStore:
    assert cli_json(env, "db", "migrate")["applied"] == VERSIONS
    store = MySQLStore.from_url(database_url)
    yield store
    store.close()


def ingest(store: MySQLStore, offset: int, order: str, location: str = "WH-1", timestamp_ms: int = NOW):
    event = decode(record(offset, order=order, location=location, timestamp_ms=timestamp_ms),
                   FieldNames(), 256 * 1024)
    store.ingest([event], NOW)


def test_help_everywhere():
    for args in ([], ["db"], ["dlq"], ["partitions"], ["status"], ["flush"], ["dlq", "redrive"],
                 ["partitions", "drop"], ["demo"]):
        result = runner.invoke(app, [*args, "--help"])
        assert result.exit_code == 0, (args, result.output)
        assert "Usage" in result.output


def test_configuration_error_is_one_line_and_exit_2(env):
    env = {"CONSOLIDATOR_DATABASE_URL": "postgres://nope"}
    result = cli(env, "status")
    assert result.exit_code == 2
    assert "CONSOLIDATOR_DATABASE_URL" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_usage_error_exit_2(env):
    assert cli(env, "partitions", "drop").exit_code == 2  # neither names nor --expired
    assert cli(env, "flush").exit_code == 2  # neither --once, --dry-run nor --seconds
    assert cli(env, "no-such-command").exit_code == 2


def test_unreachable_database_exit_1(env):
    env = env | {"CONSOLIDATOR_DATABASE_URL": "mysql://root@127.0.0.1:1/none"}
    result = cli(env, "status")
    assert result.exit_code == 1
    assert "database unavailable" in result.stderr


def test_db_migrate_is_idempotent(env, migrated):
    second = cli_json(env, "db", "migrate")
    assert second == {"applied": [], "schema_version": max(VERSIONS)}
    result = cli(env, "db", "migrate")
    assert result.exit_code == 0 and "up to date" in result.stdout


def test_status_shows_pending_groups_batches_and_partitions(env, migrated):
    ingest(migrated, 1, "A1", "WH-1")
    ingest(migrated, 2, "A2", "WH-1")
    ingest(migrated, 3, "B1", "WH-2")
    document = cli_json(env, "status")
    assert document["rows"] == {"PENDING": 3}
    assert [(g["group_key"], g["pending"]) for g in document["groups"]] == [("WH-1", 2), ("WH-2", 1)]
    assert all(g["oldest_age_s"] >= 0 for g in document["groups"])
    assert document["claimed"] == [] and document["dead"] == []
    names = [p["name"] for p in document["partitions"]]
    assert names == [f"p{months_after(MONTH, -1)}", f"p{MONTH}", "pmax"]
    assert {p["name"]: p["unsent_rows"] for p in document["partitions"]}[f"p{MONTH}"] == 3
    human = cli(env, "status")
    assert human.exit_code == 0 and "WH-1" in human.stdout and "PENDING 3" in human.stdout


def test_partitions_ensure_list_and_idempotence(env, migrated):
    first = cli_json(env, "partitions", "ensure", "--ahead", "2")
    assert first["created"] == [f"p{months_after(MONTH, 1)}", f"p{months_after(MONTH, 2)}"]
    assert cli_json(env, "partitions", "ensure", "--ahead", "2")["created"] == []
    listed = [p["name"] for p in cli_json(env, "partitions", "list")["partitions"]]
    assert listed[-3:] == [f"p{months_after(MONTH, 1)}", f"p{months_after(MONTH, 2)}", "pmax"]


def test_partitions_drop_refuses_with_unsent_rows_and_says_how_many(env, migrated):
    old = f"p{months_after(MONTH, -1)}"
    ingest(migrated, 1, "A1", timestamp_ms=LAST_MONTH_MS)
    ingest(migrated, 2, "A2", timestamp_ms=LAST_MONTH_MS)
    assert bucket_of(LAST_MONTH_MS) < MONTH

    within = cli_json(env, "partitions", "drop", old, exit_code=1)  # within the retention
    assert within["dropped"] == [] and "--force" in within["errors"][0]["error"]

    refused = cli_json(env, "partitions", "drop", old, "--force", exit_code=1)
    assert refused["refused"] == [{"partition": old, "unsent_rows": 2}] and refused["dropped"] == []
    human = cli(env, "partitions", "drop", old, "--force")
    assert human.exit_code == 1 and "2 unsent" in human.stderr
    assert sql(migrated, "SELECT COUNT(*) AS n FROM buffer_rows")[0]["n"] == 2

    from consolidator.rules.policy import FlushReason

    batch = migrated.claim("WH-1", FlushReason.IDLE, 10, NOW)
    assert cli_json(env, "partitions", "drop", old, "--force", exit_code=1)["refused"][0]["unsent_rows"] == 2
    assert migrated.mark_sent(batch.batch_id, NOW)
    assert cli_json(env, "partitions", "drop", old, "--force")["dropped"] == [old]
    assert cli_json(env, "partitions", "drop", "pmax", exit_code=1)["errors"][0]["partition"] == "pmax"
    assert cli_json(env, "partitions", "drop", "--expired")["dropped"] == []  # nothing is that old


def poison_then_fixed(env, tmp_path) -> tuple[Path, list[dict]]:
    """Ingest two poison records through the real ingest service; return the dead letter."""
    from consolidator.services.ingest import build_ingest_service
    from consolidator.settings import IngestSettings

    service = build_ingest_service(IngestSettings())
    bad_quantity = json.dumps({"location_id": "WH-9", "order_id": "Z1",
                               "items": [{"sku": "S", "quantity": -1}]}).encode()
    outcome = service.ingest([record(10, bad_quantity), record(11, b"not json")])
    assert outcome.dead_lettered == 2 and not outcome.failed
    path = tmp_path / "dead-letter.jsonl"
    return path, [json.loads(line) for line in path.read_text().splitlines()]


def test_dlq_list_and_redrive_fixed_poison_idempotently(env, migrated, tmp_path):
    path, entries = poison_then_fixed(env, tmp_path)
    listed = cli_json(env, "dlq", "list")
    assert [e["reason"] for e in listed["entries"]] == ["bad_quantity", "not_json"]
    assert listed["dead_batches"] == []

    fixed = tmp_path / "fixed.jsonl"
    entries[0]["value"] = {"location_id": "WH-9", "order_id": "Z1", "items": [{"sku": "S", "quantity": 1}]}
    fixed.write_text("\n".join(json.dumps(e) for e in entries) + "\n")

    first = cli_json(env, "dlq", "redrive", "--file", str(fixed), exit_code=1)  # the 2nd is still poison
    assert first["poison"]["stored"] == 1
    assert [p["reason"] for p in first["poison"]["still_poison"]] == ["not_json"]
    rows = sql(migrated, "SELECT group_key, item_id, src_offset, status FROM buffer_rows")
    assert rows == [{"group_key": "WH-9", "item_id": "Z1", "src_offset": 10, "status": "PENDING"}]
    assert len(path.read_text().splitlines()) == 2  # still-poison entries are not dead-lettered again

    fixed.write_text(json.dumps(entries[0]) + "\n")
    second = cli_json(env, "dlq", "redrive", "--file", str(fixed))
    assert second["poison"]["stored"] == 0 and second["poison"]["replayed"] == 1 and second["ok"]
    assert sql(migrated, "SELECT COUNT(*) AS n FROM buffer_rows")[0]["n"] == 1


def test_dlq_redrive_from_the_dead_letter_after_a_config_fix(env, migrated, tmp_path, monkeypatch):
    """An event refused as too large goes in once the limit is raised."""
    from consolidator.services.ingest import build_ingest_service
    from consolidator.settings import IngestSettings

    monkeypatch.setenv("CONSOLIDATOR_MAX_EVENT_BYTES", "20")
    outcome = build_ingest_service(IngestSettings()).ingest([record(5, order="BIG")])
    monkeypatch.delenv("CONSOLIDATOR_MAX_EVENT_BYTES")
    assert outcome.dead_lettered == 1
    still = cli_json(env | {"CONSOLIDATOR_MAX_EVENT_BYTES": "20"}, "dlq", "redrive", "--from-dead-letter",
                     exit_code=1)
    assert still["poison"]["still_poison"][0]["reason"] == "too_large"
    done = cli_json(env, "dlq", "redrive", "--from-dead-letter")
    assert done["poison"]["stored"] == 1
    assert sql(migrated, "SELECT item_id FROM buffer_rows") == [{"item_id": "BIG"}]


def test_spark_subcommand_is_imported_lazily():
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from consolidator.cli import app\n"
        "r = CliRunner().invoke(app, ['--help'])\n"
        "assert r.exit_code == 0 and 'spark' in r.output, r.output\n"
        "assert 'consolidator.cli.spark.commands' not in sys.modules and 'pyspark' not in sys.modules\n"
        "r = CliRunner().invoke(app, ['spark', '--help'])\n"
        "print(r.exit_code)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    spark_cli_exists = (Path(__file__).resolve().parents[2] / "src/consolidator/cli/spark/commands.py").exists()
    assert done.stdout.strip() == ("0" if spark_cli_exists else "2")


@pytest.fixture
def flush_env(env, tmp_path, monkeypatch) -> dict[str, str]:
    import redis
    from support import LOCK_KEY, REDIS_URL

    redis.Redis.from_url(REDIS_URL).delete(LOCK_KEY)
    values = env | {"CONSOLIDATOR_REDIS_URL": REDIS_URL,
                    "CONSOLIDATOR_SINK_URL": f"file://{tmp_path / 'batches.jsonl'}",
                    # records carry the fixed T0 timestamp, days before the wall clock of the CLI
                    "CONSOLIDATOR_EVENT_TTL_SECONDS": "0"}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def idle_rows(store: MySQLStore) -> None:
    """Three rows in two groups, last updated ten minutes ago: due as idle under the defaults."""
    events = [decode(record(i, order=f"O{i}", location=loc), FieldNames(), 256 * 1024)
              for i, loc in ((1, "WH-1"), (2, "WH-1"), (3, "WH-2"))]
    store.ingest(events, NOW - 600_000)


def test_flush_dry_run_changes_nothing_then_once_publishes(flush_env, migrated, tmp_path):
    idle_rows(migrated)
    before = sql(migrated, "SELECT id, status, batch_id FROM buffer_rows ORDER BY id")
    dry = cli_json(flush_env, "flush", "--dry-run")
    assert [(d["group_key"], d["reason"], d["pending"]) for d in dry["due"]] == [("WH-1", "idle", 2), ("WH-2", "idle", 1)]
    assert sql(migrated, "SELECT id, status, batch_id FROM buffer_rows ORDER BY id") == before
    assert migrated.batch_counts() == {}
    assert not (tmp_path / "batches.jsonl").exists()
    human = cli(flush_env, "flush", "--dry-run")
    assert human.exit_code == 0 and "nothing was claimed" in human.stdout

    once = cli_json(flush_env, "flush", "--once")
    assert sorted((b["group_key"], b["size"]) for b in once["published"]) == [("WH-1", 2), ("WH-2", 1)]
    assert migrated.row_counts() == {"SENT": 3}
    assert len((tmp_path / "batches.jsonl").read_text().splitlines()) == 2
    assert cli_json(flush_env, "flush", "--once")["published"] == []


def test_flush_once_exits_1_when_publishing_fails(flush_env, migrated, tmp_path):
    idle_rows(migrated)
    (tmp_path / "a-directory").mkdir()
    env = flush_env | {"CONSOLIDATOR_SINK_URL": f"file://{tmp_path / 'a-directory'}"}
    result = cli(env, "flush", "--once")
    assert result.exit_code == 1, result.output
    assert "2 publish failures" in result.stdout
    assert migrated.row_counts() == {"CLAIMED": 3}


def test_dlq_redrive_batches_republishes_dead_batches_once(flush_env, migrated, tmp_path):
    from consolidator.rules.policy import FlushReason

    idle_rows(migrated)
    batch = migrated.claim("WH-1", FlushReason.IDLE, 10, NOW)
    assert migrated.mark_dead(batch.batch_id, NOW, "sink down")
    listed = cli_json(flush_env, "dlq", "list")
    assert [b["batch_id"] for b in listed["dead_batches"]] == [batch.batch_id]

    first = cli_json(flush_env, "dlq", "redrive", "--batches")
    assert first["batches"]["revived"] == [batch.batch_id]
    assert first["batches"]["republished"] == [batch.batch_id] and first["ok"]
    published = [json.loads(line) for line in (tmp_path / "batches.jsonl").read_text().splitlines()]
    assert batch.batch_id in {p["batch_id"] for p in published}
    assert migrated.batch_counts().get("DEAD", 0) == 0
    assert sql(migrated, f"SELECT {STATE} AS status FROM {ROWS} WHERE r.batch_id = %s", (batch.batch_id,)) == [
        {"status": "SENT"}, {"status": "SENT"}]

    second = cli_json(flush_env, "dlq", "redrive", "--batches")
    assert second["batches"]["revived"] == [] and second["ok"]


def test_dlq_redrive_refuses_a_dead_batch_whose_rows_were_dropped(flush_env, migrated, tmp_path):
    """The cleanup drops the rows of DEAD batches with their partition: such a batch is left DEAD
    (reviving it would leave a CLAIMED batch no flush can publish), and the redrive says why."""
    from consolidator.rules.policy import FlushReason

    old = f"p{months_after(MONTH, -1)}"
    ingest(migrated, 1, "A1", timestamp_ms=LAST_MONTH_MS)
    ingest(migrated, 2, "A2")
    gone = migrated.claim("WH-1", FlushReason.IDLE, 1, NOW)  # the older row, in the old partition
    kept = migrated.claim("WH-1", FlushReason.IDLE, 1, NOW)
    for batch in (gone, kept):
        assert migrated.mark_dead(batch.batch_id, NOW, "sink down")
    assert cli_json(flush_env, "partitions", "drop", old, "--force")["dropped"] == [old]

    result = cli_json(flush_env, "dlq", "redrive", "--batches", exit_code=1)
    assert result["batches"]["rows_gone"] == [gone.batch_id] and result["batches"]["revived"] == [kept.batch_id]
    assert result["batches"]["republished"] == [kept.batch_id] and not result["ok"]
    assert migrated.batch_counts() == {"DEAD": 1, "SENT": 1}
    human = cli(flush_env, "dlq", "redrive", "--batches", "--batch-id", gone.batch_id)
    assert human.exit_code == 1 and "1 of its 1 rows were dropped" in human.stderr


def test_spark_sub_app_is_mounted_with_its_commands_and_options(monkeypatch):
    import types

    import typer

    calls = []
    fake = typer.Typer(no_args_is_help=True)

    @fake.command()
    def replay(path: str, speed: int = 1) -> None:
        calls.append((path, speed))

    @fake.command()
    def stream() -> None:
        calls.append("stream")

    module = types.ModuleType("consolidator.cli.spark.commands")
    module.spark_app = fake
    monkeypatch.setitem(sys.modules, "consolidator.cli.spark.commands", module)
    assert runner.invoke(app, ["spark", "replay", "in.jsonl", "--speed", "3"]).exit_code == 0
    assert calls == [("in.jsonl", 3)]
    assert runner.invoke(app, ["spark", "replay", "--bogus"]).exit_code == 2
    assert "replay" in runner.invoke(app, ["spark", "--help"]).output


def test_dlq_list_and_redrive_from_an_sqs_dead_letter(env, migrated, monkeypatch):
    import boto3
    from moto import mock_aws

    from consolidator.rules.deadletter import poison_entry
    from consolidator.rules.events import PoisonEvent
    from consolidator.sinks.deadletter import SqsDeadLetter

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        queue_url = boto3.client("sqs", region_name="us-east-1").create_queue(
            QueueName="dlq", Attributes={"VisibilityTimeout": "0"})["QueueUrl"]  # list, then redrive
        url = "sqs://" + queue_url.removeprefix("https://").removeprefix("http://")
        bad, broken = record(21, order="TOO-BIG"), record(22, b"{broken")
        for poison in (bad, broken):
            try:
                decode(poison, FieldNames(), 20)
            except PoisonEvent as error:
                assert SqsDeadLetter(queue_url).send([poison_entry(poison, error, NOW)]) == set()
        sqs_env = env | {"CONSOLIDATOR_DEAD_LETTER_URL": url}
        listed = cli_json(sqs_env, "dlq", "list")
        assert sorted(e["reason"] for e in listed["entries"]) == ["not_json", "too_large"]  # once each
        done = cli_json(sqs_env, "dlq", "redrive", "--from-dead-letter", exit_code=1)  # one is still poison
        assert done["poison"]["stored"] == 1
        assert done["dead_letter"] == {"deleted": 1, "delete_failed": 0}
        left = [json.loads(m["Body"]) for m in boto3.client("sqs", region_name="us-east-1").receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])]
        assert [e["reason"] for e in left] == ["not_json"]  # the settled entry is gone, the other waits
    assert sql(migrated, "SELECT item_id, src_offset FROM buffer_rows") == [{"item_id": "TOO-BIG", "src_offset": 21}]
