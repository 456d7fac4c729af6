"""Secrets Manager wiring (moto): the database secret and the Redis AUTH token."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from consolidator.services.flush_setup import build_flush_service
from consolidator.settings import FlushSettings, load_settings
from consolidator.store import open_store


@pytest.fixture
def aws(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    with mock_aws():
        yield boto3.client("secretsmanager", region_name="eu-west-1")


def test_database_secret_gives_connection_with_tls(aws):
    arn = aws.create_secret(Name="db", SecretString=json.dumps(
        {"host": "db.internal", "port": 3307, "username": "app", "password": "p@ss", "dbname": "buffer"}))["ARN"]
    store = open_store(None, arn)
    assert (store.params.host, store.params.port, store.params.user, store.params.password,
            store.params.database, store.params.ssl) == ("db.internal", 3307, "app", "p@ss", "buffer", True)


def test_redis_auth_token_comes_from_its_secret(aws, monkeypatch, tmp_path):
    arn = aws.create_secret(Name="redis-auth", SecretString="s3cr3t-token")["ARN"]
    for name, value in {
        "DATABASE_URL": "mysql://root:@127.0.0.1:3306/x", "DEAD_LETTER_URL": f"file://{tmp_path}/dlq.jsonl",
        "SINK_URL": f"file://{tmp_path}/out.jsonl", "REDIS_URL": "rediss://cache.internal:6379/0",
        "REDIS_AUTH_SECRET_ARN": arn,
    }.items():
        monkeypatch.setenv(f"CONSOLIDATOR_{name}", value)
    service = build_flush_service(load_settings(FlushSettings))
    kwargs = service.lock.client.connection_pool.connection_kwargs
    assert (kwargs["password"], kwargs["host"]) == ("s3cr3t-token", "cache.internal")
