"""Never drop what you did not create: the demo, the bench's helper and ``db migrate`` refuse a
system schema and any database they did not create themselves, exit 2 with one line, and the
database survives with its table and row.

System schemas are attempted on a MariaDB of this module only (its own port and data
directory), never on the shared server: ``mysql`` and ``sys`` there are stand-ins made here,
each with a table and a row."""

from __future__ import annotations

import uuid

import local_mariadb
import pymysql
import pytest
from support import MYSQL_HOST, MYSQL_PASSWORD, MYSQL_PORT, MYSQL_USER
from typer.testing import CliRunner

from consolidator.cli import app
from consolidator.demo.config import DemoConfig
from consolidator.demo.runner import DEMO_CREATOR, demo_database_url
from consolidator.rules.errors import DatabaseNotOwned
from consolidator.store.databases import (
    create_owned_database,
    drop_owned_database,
    recreate_owned_database,
)
from consolidator.store.mysql import ConnectionParams, MySQLStore

SYSTEM = ["mysql", "sys", "MySQL", "information_schema", "performance_schema"]
REDIS_URL = "redis://127.0.0.1:6379/13"  # no other test's flush lock
SHARED = f"mysql://{MYSQL_USER}:{MYSQL_PASSWORD}@{MYSQL_HOST}:{MYSQL_PORT}/"


@pytest.fixture(scope="module")
def private_server():
    """Server URL (no database) of a MariaDB of this module, with stand-ins for the system
    schemas ``mysql`` and ``sys``: each holds the table ``keep`` with one row."""
    if not local_mariadb.available():
        pytest.skip("needs mariadbd")
    with local_mariadb.mariadb() as port:
        with pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True) as conn, conn.cursor() as cur:
            for name in ("mysql", "sys"):
                cur.execute(f"CREATE DATABASE IF NOT EXISTS {name}")
                cur.execute(f"CREATE TABLE {name}.keep (v INT)")
                cur.execute(f"INSERT INTO {name}.keep VALUES (42)")
        yield f"mysql://root@127.0.0.1:{port}/"


def _rows(server: str, database: str, table: str) -> list[tuple]:
    p = ConnectionParams.from_url(server + database)
    with pymysql.connect(host=p.host, port=p.port, user=p.user, password=p.password) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{database}`.`{table}`")
        return list(cur.fetchall())


def _schemata(server: str) -> set[str]:
    p = ConnectionParams.from_url(server)
    with pymysql.connect(host=p.host, port=p.port, user=p.user, password=p.password) as conn, conn.cursor() as cur:
        cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
        return {row[0] for row in cur.fetchall()}


def _demo(server: str, name: str):
    return CliRunner().invoke(app, ["demo", "--database-url", server, "--database-name", name,
                                    "--redis-url", REDIS_URL, "--orders", "20", "--warehouses", "2",
                                    "--poison", "0", "--bursts", "1", "--json"])


def _refused_in_one_line(result, name: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing" in lines[0] and repr(name) in lines[0], result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("name", SYSTEM)
def test_the_demo_refuses_a_system_schema(private_server, name):
    before = _schemata(private_server)
    _refused_in_one_line(_demo(private_server, name), name)
    assert _schemata(private_server) == before
    assert _rows(private_server, "mysql", "keep") == [(42,)] and _rows(private_server, "sys", "keep") == [(42,)]


@pytest.mark.parametrize("name", ["mysql", "sys"])
def test_db_migrate_refuses_a_system_schema(private_server, name, monkeypatch):
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_URL", private_server + name)
    result = CliRunner().invoke(app, ["db", "migrate"])
    _refused_in_one_line(result, name)
    p = ConnectionParams.from_url(private_server)
    with pymysql.connect(host=p.host, port=p.port, user=p.user) as conn, conn.cursor() as cur:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (name,))
        assert [row[0] for row in cur.fetchall()] == ["keep"]


def _database_with_a_table(database_url: str) -> tuple[str, str]:
    name = database_url.rsplit("/", 1)[1]
    p = ConnectionParams.from_url(database_url)
    with pymysql.connect(host=p.host, port=p.port, user=p.user, password=p.password, database=name,
                         autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE customers (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO customers VALUES (7)")
    return SHARED, name


def test_the_demo_refuses_an_existing_database_it_did_not_create(database_url):
    server, name = _database_with_a_table(database_url)
    _refused_in_one_line(_demo(server, name), name)
    assert _rows(server, name, "customers") == [(7,)]


def test_the_demo_refuses_a_production_consolidator_database(store, database_url):
    """Migrated by ``db migrate`` (schema tables, rows) but not created by the demo."""
    name = database_url.rsplit("/", 1)[1]
    version = store.schema_version()
    _refused_in_one_line(_demo(SHARED, name), name)
    assert MySQLStore.from_url(database_url).schema_version() == version >= 1


def test_a_tool_drops_only_a_database_it_created():
    name = f"consolidator_owned_{uuid.uuid4().hex[:10]}"
    params = ConnectionParams.from_url(SHARED + name)
    create_owned_database(params, "consolidator bench", 1)
    try:
        with pytest.raises(DatabaseNotOwned, match="created by consolidator bench"):
            recreate_owned_database(params, DEMO_CREATOR, 2)  # the demo does not drop the bench's
        with pytest.raises(DatabaseNotOwned, match="exists already"):
            create_owned_database(params, "consolidator bench", 3)  # nor is an existing one taken over
        recreate_owned_database(params, "consolidator bench", 4)  # its own: dropped and made again
        assert _rows(SHARED, name, "consolidator_created_by") == [("consolidator bench", 4)]
    finally:
        assert drop_owned_database(params, "consolidator bench")
    assert name not in _schemata(SHARED)
    assert not drop_owned_database(params, "consolidator bench")  # gone: nothing to drop


def test_the_demo_ignores_the_server_of_consolidator_database_url(monkeypatch):
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_URL", "mysql://admin:pw@prod-db.example.com:3306/consolidator")
    url = demo_database_url(DemoConfig())
    assert ConnectionParams.from_url(url).host == "127.0.0.1" and url.endswith("/consolidator_demo")
    explicit = demo_database_url(DemoConfig(database_url="mysql://root@10.0.0.5:3307/"))
    assert explicit == "mysql://root@10.0.0.5:3307/consolidator_demo"
