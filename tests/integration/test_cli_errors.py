"""Errors that point at the fix, through the real CLI: an aggregation spec's missing keys are named
with an example (not "not None", not the whole spec echoed back), a configuration error is the
only line a command prints, a database user that may log in only by the server's socket is
named with the fix, and a Redis that answers but refuses is not called unreachable."""

from __future__ import annotations

import json
import uuid

import pymysql
import pytest
from support import MYSQL_HOST, MYSQL_PASSWORD, MYSQL_PORT, MYSQL_USER
from test_cli import cli, env, flush_env, idle_rows, migrated  # noqa: F401 (fixtures)

SPEC = [{"name": "lines", "op": "group_sum", "path": "lines", "sum": ["amt"]},  # no "by"
        {"op": "count", "path": "props.page"},                                  # no "name"
        {"name": "total", "op": "sum"}]                                         # no "path"


def test_an_aggregation_spec_error_names_each_missing_key_with_an_example(env, migrated, tmp_path):  # noqa: F811
    events = tmp_path / "events.jsonl"
    events.write_text('{"tenant": "t", "user": "u"}\n')
    result = cli(env | {"CONSOLIDATOR_AGGREGATE": json.dumps(SPEC)}, "ingest", "--file", str(events))
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()  # no "reading ..." line before it
    assert line == (
        "configuration error: invalid configuration: CONSOLIDATOR_AGGREGATE: "
        "entry 0 ('lines'): by is missing, e.g. \"by\": \"sku\" (the field of each object to group by); "
        "entry 1 (op 'count'): name is missing: every output has one, e.g. \"name\": \"total\"; "
        "entry 2 ('total'): path is missing, e.g. \"path\": \"amount\" (the value it reads)")


@pytest.fixture
def socket_only_user():
    """A database user the server admits only through its unix socket (MariaDB's unix_socket)."""
    name = f"cliedges_{uuid.uuid4().hex[:8]}"

    def admin(statement: str) -> None:
        with pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user=MYSQL_USER, password=MYSQL_PASSWORD,
                             autocommit=True) as connection, connection.cursor() as cursor:
            cursor.execute(statement)

    admin(f"CREATE USER '{name}'@'%' IDENTIFIED VIA unix_socket")
    yield name
    admin(f"DROP USER IF EXISTS '{name}'@'%'")


def test_a_user_the_server_admits_only_by_its_socket_is_named_with_the_fix(env, migrated, socket_only_user):  # noqa: F811
    database = env["CONSOLIDATOR_DATABASE_URL"].rsplit("/", 1)[1]
    url = f"mysql://{socket_only_user}@{MYSQL_HOST}:{MYSQL_PORT}/{database}"
    result = cli(env | {"CONSOLIDATOR_DATABASE_URL": url}, "status")
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.strip().splitlines()
    assert f"database refused user '{socket_only_user}' (access denied, 1698)" in line
    assert "only through its local unix socket" in line and "CREATE USER" in line
    assert "database error" not in line


def test_a_redis_database_number_the_server_lacks_is_refused_not_unreachable(flush_env, migrated):  # noqa: F811
    idle_rows(migrated)
    result = cli(flush_env | {"CONSOLIDATOR_REDIS_URL": "redis://127.0.0.1:6379/99"}, "flush", "--once")
    assert result.exit_code == 1, result.output
    assert "Redis refused the database number of the URL: DB index is out of range" in result.stderr
    assert "/N (0 to 15" in result.stderr and "unreachable" not in result.output
    assert migrated.row_counts() == {"PENDING": 3}, "nothing was flushed"
