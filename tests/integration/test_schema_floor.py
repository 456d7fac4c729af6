"""The migration floor: `db migrate` brings any older schema to the current one, and the runtime
refuses an older schema with one line that says what to run, before it reads or writes."""

from __future__ import annotations

import pytest
from support import T0
from test_cli import cli, cli_json, env  # noqa: F401 - the CLI fixture

from consolidator.rules.errors import SchemaOutdated
from consolidator.store import open_store, schema
from consolidator.store.mysql import ConnectionParams, MySQLStore


def migrate_to(database_url: str, version: int, monkeypatch) -> None:
    every = schema._migrations
    monkeypatch.setattr(schema, "_migrations", lambda *args: [m for m in every(*args) if m[0] <= version])
    store = MySQLStore(ConnectionParams.from_url(database_url))
    assert store.migrate(T0)[-1] == version
    store.close()
    monkeypatch.setattr(schema, "_migrations", every)


def test_the_current_version_is_the_last_migration():
    assert schema.SCHEMA_VERSION == schema._migrations(0, "utf8mb4_bin")[-1][0]


@pytest.mark.parametrize("version", [0, 7, 10])
def test_the_runtime_refuses_an_older_schema_in_one_line(database_url, monkeypatch, version):
    if version:
        migrate_to(database_url, version, monkeypatch)
    store = open_store(database_url)
    with pytest.raises(SchemaOutdated) as refused:
        store.row_counts()
    message = str(refused.value)
    assert "\n" not in message
    assert f"schema version {version};" in message and f"needs version {schema.SCHEMA_VERSION}" in message
    assert "consolidator db migrate" in message
    with pytest.raises(SchemaOutdated):  # checked again on the next connection, not remembered as good
        store.row_counts()

    migrating = open_store(database_url, migrating=True)
    assert migrating.migrate(T0) == list(range(version + 1, schema.SCHEMA_VERSION + 1))
    migrating.close()
    assert store.row_counts() == {}
    store.close()


def test_the_cli_says_it_in_one_line_and_db_migrate_brings_the_schema_up(env, database_url, monkeypatch):  # noqa: F811
    migrate_to(database_url, 8, monkeypatch)
    refused = cli(env, "status")
    assert refused.exit_code == 1
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "schema version 8" in lines[0] and "consolidator db migrate" in lines[0], lines
    assert cli_json(env, "db", "migrate") == {"applied": list(range(9, schema.SCHEMA_VERSION + 1)),
                                                "schema_version": schema.SCHEMA_VERSION}
    assert cli(env, "status").exit_code == 0
