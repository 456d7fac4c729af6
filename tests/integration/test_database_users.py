"""Least privilege in the database: the migration creates one user per function from that
function's secret (moto), and each function's real code runs as its own user on the shared
MariaDB, while DDL, GRANT and DROP DATABASE are refused to it.

MySQL users are server-wide: every user here is named after this test's database and dropped at
teardown; no other user is touched."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from urllib.parse import urlsplit

import boto3
import pymysql
import pytest
import redis
from moto import mock_aws
from support import LOCK_KEY, MYSQL_HOST, MYSQL_PASSWORD, MYSQL_PORT, MYSQL_USER, REDIS_URL, record
from test_acks_handler import lambda_event, received
from test_ingest_handler import load_handler

from consolidator.consumer.acks import AckClient
from consolidator.demo.lambda_context import LocalLambdaContext
from consolidator.rules.clock import ManualClock
from consolidator.services.cleanup import CleanupService
from consolidator.sources.msk import event_from_records
from consolidator.store import open_store
from consolidator.store.users import GRANTS

REGION = "eu-west-1"
ROLES = ("ingest", "flush", "acks", "cleanup")
ACCESS_DENIED_CODES = {1044, 1045, 1142, 1227, 1370}  # database, login, table, global, routine


def _admin(statement: str, args=None) -> list[tuple]:
    with pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user=MYSQL_USER, password=MYSQL_PASSWORD,
                         autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(statement, args)
        return list(cur.fetchall())


@pytest.fixture
def aws(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Consolidator")
    with mock_aws():
        yield


@pytest.fixture
def users(aws, database_url):
    """One RDS-format secret per role (a user named after this test's database); those users
    are dropped after the test, whether the migration created them or not."""
    database = urlsplit(database_url).path.lstrip("/")
    suffix = database.rsplit("_", 1)[-1]
    client = boto3.client("secretsmanager", region_name=REGION)
    credentials = {role: (f"{role}_{suffix}", f"Pw-{uuid.uuid4().hex}") for role in ROLES}
    arns = {
        role: client.create_secret(Name=f"{database}-{role}", SecretString=json.dumps({
            "engine": "mysql", "host": "db.cluster.internal", "port": 3306, "username": user,
            "password": password, "dbname": database}))["ARN"]
        for role, (user, password) in credentials.items()
    }
    yield {"database": database, "arns": arns, "credentials": credentials}
    for user, _ in credentials.values():
        _admin("DROP USER IF EXISTS %s@'%%'", (user,))


def _migrate(monkeypatch, database_url: str, arns: dict) -> dict:
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_URL", database_url)  # the master user (root here)
    monkeypatch.delenv("CONSOLIDATOR_DATABASE_SECRET_ARN", raising=False)
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_USERS", json.dumps(arns))
    return load_handler("migrate").handler({}, LocalLambdaContext(function_name="migrate"))


def _as_role(monkeypatch, users: dict, role: str) -> None:
    """The function's settings: location from the URL (no TLS locally), user and password from its secret."""
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_URL", f"mysql://{MYSQL_HOST}:{MYSQL_PORT}/{users['database']}")
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_SECRET_ARN", users["arns"][role])


def _refused(users: dict, role: str, statement: str) -> bool:
    user, password = users["credentials"][role]
    with pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user=user, password=password,
                         database=users["database"], autocommit=True) as conn, conn.cursor() as cur:
        try:
            cur.execute(statement)
        except pymysql.err.MySQLError as exc:
            assert exc.args[0] in ACCESS_DENIED_CODES, (role, statement, exc)
            return True
    return False


def test_migration_creates_each_function_user_with_only_its_privileges(users, database_url, monkeypatch):
    report = _migrate(monkeypatch, database_url, users["arns"])
    assert report["users"] == {role: user for role, (user, _) in users["credentials"].items()}
    assert not any(password in json.dumps(report) for _, password in users["credentials"].values())
    database = users["database"]
    for role in ROLES:
        for statement in ("CREATE TABLE intruder (x INT)", f"DROP DATABASE `{database}`", "DROP TABLE batches",
                          "DROP TABLE schema_migrations", "CREATE USER intruder IDENTIFIED BY 'x'",
                          f"GRANT SELECT ON `{database}`.* TO CURRENT_USER()", "SELECT * FROM mysql.user",
                          "TRUNCATE TABLE partition_offsets"):
            assert _refused(users, role, statement), (role, statement)
        if role != "cleanup":
            assert _refused(users, role, "ALTER TABLE buffer_rows ADD COLUMN x INT"), role
    assert not _refused(users, "ingest", "INSERT INTO partition_offsets (src_topic, src_partition, high_water)"
                                         " VALUES ('t', 0, 1)")
    assert _refused(users, "ingest", "DELETE FROM partition_offsets")
    assert _refused(users, "acks", "UPDATE buffer_rows SET status = 'SENT'")
    assert _refused(users, "flush", "DELETE FROM batches")

    # idempotent, and exact: a privilege granted by hand is revoked by the next run
    ingest_user = users["credentials"]["ingest"][0]
    _admin(f"GRANT DELETE, DROP ON `{database}`.partition_offsets TO %s@'%%'", (ingest_user,))
    _admin(f"GRANT CREATE ON `{database}`.* TO %s@'%%'", (ingest_user,))
    assert not _refused(users, "ingest", "DELETE FROM partition_offsets")
    assert _migrate(monkeypatch, database_url, users["arns"])["applied"] == []
    assert _refused(users, "ingest", "DELETE FROM partition_offsets")
    assert _refused(users, "ingest", "CREATE TABLE intruder (x INT)")
    assert not _refused(users, "ingest", "SELECT COUNT(*) FROM partition_offsets")


def test_migration_sets_the_password_of_the_secret(users, database_url, monkeypatch):
    _migrate(monkeypatch, database_url, users["arns"])
    user, _ = users["credentials"]["flush"]
    boto3.client("secretsmanager", region_name=REGION).put_secret_value(
        SecretId=users["arns"]["flush"], SecretString=json.dumps({
            "host": "db.cluster.internal", "port": 3306, "username": user, "password": "Rotated-Pa55",
            "dbname": users["database"]}))
    users["credentials"]["flush"] = (user, "Rotated-Pa55")
    _migrate(monkeypatch, database_url, users["arns"])
    assert not _refused(users, "flush", "SELECT COUNT(*) FROM batches")


def test_migration_refuses_an_unknown_role_by_name(users, database_url, monkeypatch):
    with pytest.raises(ValueError, match="unknown database role.*admin"):
        _migrate(monkeypatch, database_url, {"admin": users["arns"]["ingest"]})


def test_every_table_of_the_schema_is_granted_to_some_function_or_left_to_the_migration(users, database_url,
                                                                                        monkeypatch):
    """A new table is a decision: grant it to the functions that use it (store/users.py)."""
    _migrate(monkeypatch, database_url, users["arns"])
    tables = {row[0] for row in _admin("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
                                       (users["database"],))}
    granted = {table for tables_of_role in GRANTS.values() for table in tables_of_role}
    assert tables <= granted  # schema_migrations too: each function reads the schema version it requires
    assert all(GRANTS[role]["schema_migrations"] == {"SELECT"} for role in GRANTS)


def test_each_function_runs_its_code_as_its_own_user(users, database_url, monkeypatch, tmp_path):
    _migrate(monkeypatch, database_url, users["arns"])
    sqs = boto3.client("sqs", region_name=REGION)
    completions = sqs.create_queue(QueueName="completions")["QueueUrl"]
    acks_queue = sqs.create_queue(QueueName="acks")["QueueUrl"]
    monkeypatch.setenv("CONSOLIDATOR_DEAD_LETTER_URL", f"file://{tmp_path}/dead-letter.jsonl")

    # ingest: records of two groups, applied and replay-protected
    _as_role(monkeypatch, users, "ingest")
    ingest = load_handler("ingest")
    now = time.time_ns() // 1_000_000
    event = event_from_records([record(i, location=f"WH-{i % 2}", order=f"O{i}", timestamp_ms=now) for i in range(4)])
    assert ingest.handler(event, LocalLambdaContext(function_name="ingest")) == {"batchItemFailures": []}
    assert ingest.handler(event, LocalLambdaContext(function_name="ingest")) == {"batchItemFailures": []}  # replay

    # flush: claims, seals for completion tracking, publishes, marks sent
    _as_role(monkeypatch, users, "flush")
    for name, value in {"REDIS_URL": REDIS_URL, "SINK_URL": f"file://{tmp_path}/batches.jsonl",
                        "DEBOUNCE_SECONDS": "0.001", "TICK_INTERVAL_SECONDS": "0.25", "LOCK_TTL_SECONDS": "5",
                        "COMPLETION_TRACKING": "true"}.items():
        monkeypatch.setenv(f"CONSOLIDATOR_{name}", value)
    try:
        result = load_handler("flush").handler({}, LocalLambdaContext(function_name="flush", timeout_ms=1_000))
    finally:
        redis.Redis.from_url(REDIS_URL).delete(LOCK_KEY)
    assert result["published"] == 2 and result["dead"] == 0 and result["publish_failures"] == 0, result
    batches = [json.loads(line) for line in (tmp_path / "batches.jsonl").read_text().splitlines()]

    # acks: every member of both batches acknowledged, completions published, then the sweep
    _as_role(monkeypatch, users, "acks")
    monkeypatch.setenv("CONSOLIDATOR_COMPLETION_SINK_URL", "sqs://" + completions.removeprefix("https://"))
    sender = AckClient(acks_queue, client=sqs)
    for batch in batches:
        sender.ack(batch, members=list(range(len(batch["members"]))))
    acks = load_handler("acks")
    response = acks.handler(lambda_event(received(sqs, acks_queue)), LocalLambdaContext(function_name="acks"))
    assert response == {"batchItemFailures": []}
    assert len(received(sqs, completions)) == 2
    sweep = acks.handler({"source": "aws.events"}, LocalLambdaContext(function_name="acks"))
    assert sweep["publish_failures"] == 0

    # cleanup, months later: partitions added ahead, the sent ones dropped, finished trackers removed
    _as_role(monkeypatch, users, "cleanup")
    store = open_store(f"mysql://{MYSQL_HOST}:{MYSQL_PORT}/{users['database']}", users["arns"]["cleanup"])
    later = ManualClock(int(datetime(datetime.now(UTC).year + 1, 12, 1, tzinfo=UTC).timestamp() * 1000))
    report = CleanupService(store, later, retention_months=3, partitions_ahead=2,
                            completion_max_age_ms=86_400_000).run()
    store.close()
    assert report.created and report.dropped and report.refused == [], report
    assert report.trackers_removed["finished"] == 2, report
    assert sum(report.trackers_removed.values()) == 2
