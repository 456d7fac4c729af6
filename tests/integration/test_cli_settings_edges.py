"""Settings nothing reads silently: a database URL names its database, and ``flush --dry-run``
refuses every setting ``flush --once`` refuses (a dry run that passes means the flush starts).
Through the real CLI."""

from __future__ import annotations

import pytest
from test_cli import cli, env, flush_env, migrated  # noqa: F401 (fixtures)


@pytest.mark.parametrize("url", ["mysql://root@127.0.0.1:3306", "mysql://root@127.0.0.1:3306/",
                                 "mysql://root@127.0.0.1:3306/?ssl=false"])
@pytest.mark.parametrize("command", [("status",), ("db", "migrate"), ("flush", "--dry-run")])
def test_a_database_url_without_a_database_name_is_refused(env, url, command):  # noqa: F811
    result = cli(env | {"CONSOLIDATOR_DATABASE_URL": url}, *command)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert "CONSOLIDATOR_DATABASE_URL: the URL names no database" in line
    assert "mysql://user@host:3306/consolidator" in line


BAD = [
    ("CONSOLIDATOR_AGGREGATE", '[{"name": "n", "op": "median"}]'),
    ("CONSOLIDATOR_MEMBER_PAYLOAD", "some"),
    ("CONSOLIDATOR_MAX_ATTEMPTS", "0"),
    ("CONSOLIDATOR_LOCK_TTL_SECONDS", "nan"),
    ("CONSOLIDATOR_MAX_ROWS_PER_TICK", "-1"),
    ("CONSOLIDATOR_COMPLETION_TRACKING", "maybe"),
    ("CONSOLIDATOR_SINK_URL", "kafka://nowhere"),
    ("CONSOLIDATOR_DEAD_LETTER_URL", "s3://bucket/x"),
    ("CONSOLIDATOR_REDIS_URL", "redis://127.0.0.1:6379/x"),
    ("CONSOLIDATOR_REDIS_AUTH_SECRET_ARN", "not-an-arn"),
    ("CONSOLIDATOR_MAX_BATCH_BYTES", "2000000"),  # over the file sink's 1,000,000-byte limit
    ("CONSOLIDATOR_MAX_EVENT_BYTES", "0"),
]


@pytest.mark.parametrize(("variable", "value"), BAD, ids=[v for v, _ in BAD])
def test_flush_dry_run_refuses_every_setting_flush_once_refuses(flush_env, migrated, variable, value):  # noqa: F811
    bad = flush_env | {variable: value}
    once = cli(bad, "flush", "--once")
    assert once.exit_code == 2 and variable in once.stderr, once.output
    dry = cli(bad, "flush", "--dry-run")
    assert dry.exit_code == 2, dry.output
    (line,) = dry.stderr.strip().splitlines()
    assert variable in line and line.startswith("configuration error:"), line


def test_flush_dry_run_still_needs_only_the_database(env, migrated):  # noqa: F811
    result = cli(env | {"CONSOLIDATOR_AGGREGATE": '[{"name": "n", "op": "count"}]'}, "flush", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "due groups (0); nothing was claimed" in result.stdout
