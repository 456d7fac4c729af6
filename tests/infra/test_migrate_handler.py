"""The deploy-time migrate handler (run by the CDK trigger) against real MariaDB."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pymysql
import pytest

from consolidator.demo.lambda_context import LocalLambdaContext
from consolidator.rules.errors import ConfigurationError

HANDLER = Path(__file__).resolve().parents[2] / "functions" / "migrate" / "handler.py"


def _load():
    spec = importlib.util.spec_from_file_location("migrate_handler_under_test", HANDLER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_migrate_applies_once_then_is_a_no_op(database_url, monkeypatch):
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_URL", database_url)
    module = _load()
    first = module.handler({}, LocalLambdaContext(function_name="migrate"))
    assert first["applied"]
    assert module.handler({}, LocalLambdaContext(function_name="migrate")) == {"applied": [], "users": {}}
    name = database_url.rsplit("/", 1)[1]
    with pymysql.connect(host="127.0.0.1", user="root", database=name) as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM schema_migrations")
        assert cur.fetchone()[0] == len(first["applied"])


def test_migrate_without_database_settings_fails_naming_the_variable(monkeypatch):
    monkeypatch.delenv("CONSOLIDATOR_DATABASE_URL", raising=False)
    monkeypatch.delenv("CONSOLIDATOR_DATABASE_SECRET_ARN", raising=False)
    module = _load()
    with pytest.raises(ConfigurationError, match="CONSOLIDATOR_DATABASE_URL"):
        module.handler({}, LocalLambdaContext(function_name="migrate"))
