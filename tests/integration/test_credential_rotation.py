"""Credential rotation on the shared MariaDB: a user whose password changes mid-run and a moto
secret that is updated. Access denied re-reads the secret once; still denied raises."""

from __future__ import annotations

import json
import uuid
from urllib.parse import urlsplit

import boto3
import pymysql
import pytest
from moto import mock_aws
from support import MYSQL_HOST, MYSQL_PASSWORD, MYSQL_PORT, MYSQL_USER, T0, record, sql
from test_ingest_handler import load_handler

from consolidator.demo.lambda_context import LocalLambdaContext
from consolidator.rules.errors import StoreRefused
from consolidator.sources.msk import event_from_records
from consolidator.store import open_store


def _admin(statement: str, args=None) -> list[tuple]:
    with pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user=MYSQL_USER, password=MYSQL_PASSWORD,
                         autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(statement, args)
        return list(cur.fetchall())


@pytest.fixture
def app_user(database_url, store):
    """A user of the test database only, dropped after the test."""
    name = f"h10rot_{uuid.uuid4().hex[:10]}"
    database = urlsplit(database_url).path.lstrip("/")
    _admin(f"CREATE USER '{name}'@'%' IDENTIFIED BY 'first-Pa55'")
    _admin(f"GRANT ALL PRIVILEGES ON `{database}`.* TO '{name}'@'%'")
    yield name
    _admin(f"DROP USER IF EXISTS '{name}'@'%'")


def _rotate(user: str, password: str, store) -> None:
    """New password; the warm container's session ends (a failover or idle timeout), so its
    next transaction connects again. Sessions open before a rotation keep working meanwhile."""
    _admin(f"ALTER USER '{user}'@'%%' IDENTIFIED BY %s", (password,))
    store.close()


@pytest.fixture
def secrets(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("secretsmanager", region_name="eu-west-1")


def _secret(user: str, password: str, database: str) -> str:
    return json.dumps({"engine": "mysql", "host": "db.cluster.internal", "port": 3306, "username": user,
                       "password": password, "dbname": database})


def test_warm_ingest_container_follows_a_rotated_secret_and_raises_when_still_denied(
        app_user, secrets, database_url, store, monkeypatch, tmp_path):
    database = urlsplit(database_url).path.lstrip("/")
    arn = secrets.create_secret(Name="db", SecretString=_secret(app_user, "first-Pa55", database))["ARN"]
    # location from the URL (the shared MariaDB, no TLS), credentials from the secret
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_URL", f"mysql://{MYSQL_HOST}:{MYSQL_PORT}/{database}")
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_SECRET_ARN", arn)
    monkeypatch.setenv("CONSOLIDATOR_DEAD_LETTER_URL", f"file://{tmp_path}/dead-letter.jsonl")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    module = load_handler("ingest")

    def invoke(*offsets: int) -> dict:
        event = event_from_records([record(o, order=f"A{o}", timestamp_ms=T0) for o in offsets])
        return module.handler(event, LocalLambdaContext())

    assert invoke(1, 2) == {"batchItemFailures": []}
    assert sql(module.service().store, "SELECT CURRENT_USER() AS u")[0]["u"] == f"{app_user}@%"

    # rotation: the database and the secret change; the warm container's connection is gone
    _rotate(app_user, "second-Pa55", module.service().store)
    secrets.put_secret_value(SecretId=arn, SecretString=_secret(app_user, "second-Pa55", database))
    assert invoke(3, 4) == {"batchItemFailures": []}
    assert module.service().store.params.password == "second-Pa55"

    # the password changes again but the secret does not: not an outage, the invocation fails
    _rotate(app_user, "third-Pa55", module.service().store)
    with pytest.raises(StoreRefused, match="access denied") as refused:
        invoke(5, 6)
    assert "third-Pa55" not in str(refused.value) and "second-Pa55" not in str(refused.value)

    positions = {r["src_offset"] for r in sql(store, "SELECT src_offset FROM buffer_rows")}
    assert positions == {1, 2, 3, 4}


def test_a_wrong_password_in_the_url_is_refused_not_unavailable(app_user, database_url):
    database = urlsplit(database_url).path.lstrip("/")
    s = open_store(f"mysql://{app_user}:wrong@{MYSQL_HOST}:{MYSQL_PORT}/{database}")
    with pytest.raises(StoreRefused, match="1045"):
        s.ping()
