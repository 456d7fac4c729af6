"""Every input checked at the CLI's edge: bad counts and durations, sink and
database URL options, conflicting flush flags, batch ids, a missing database. Bad input exits 2
with one line naming the value and the allowed range; an unknown or malformed batch id exits 1,
with a JSON error document under ``--json``."""

from __future__ import annotations

import importlib.util
import types
import typing

import pytest
import typer
from test_cli import cli, cli_json, env, flush_env, migrated  # noqa: F401 (fixtures)
from typer._click import Context

from consolidator.cli import app


def _numeric_options() -> list[tuple[tuple[str, ...], str]]:
    """(command path, option) of every int or float option of every command (the Spark group's
    too when the spark extra is installed)."""
    found = []
    spark = importlib.util.find_spec("pyspark") is not None

    def walk(command, path: tuple[str, ...]) -> None:
        if hasattr(command, "list_commands"):
            for name in command.list_commands(Context(command)):
                if name != "spark" or spark:
                    walk(command.get_command(Context(command), name), (*path, name))
            return
        for param in command.params:
            if param.param_type_name != "option" or param.is_flag:
                continue
            annotation = param.type_descriptor.annotation
            if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
                annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
            if annotation in (int, float):
                found.append((path, param.opts[0]))

    walk(typer.main.get_command(app), ())
    return found


NUMERIC = _numeric_options()
REQUIRED = {("spark", "stream"): ("--checkpoint", "ckpt"), ("spark", "replay"): ("--out", "out")}  # else missing


@pytest.mark.parametrize(("path", "option"), NUMERIC, ids=[" ".join(p) + " " + o for p, o in NUMERIC])
@pytest.mark.parametrize("value", ["-1", "nan", "inf", "1e300", "twelve"])
def test_every_count_and_duration_is_bounded(path, option, value):
    """Nothing reaches SQL, a sleep or a loop: exit 2 and one line naming the option, the value
    and the allowed range (no database is configured: the refusal comes first)."""
    result = cli({}, *path, *REQUIRED.get(path, ()), option, value)
    assert result.exit_code == 2, (path, option, value, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert option in lines[0] and "allowed" in lines[0], lines[0]
    assert value in lines[0] or repr(value) in lines[0] or "1e+300" in lines[0], lines[0]


def test_status_limit_minus_one_never_reaches_sql(env, migrated):  # noqa: F811
    names = {(" ".join(path), option) for path, option in NUMERIC}  # the walk above finds them all
    assert {("status", "--limit"), ("flush", "--seconds"), ("dlq redrive", "--limit"), ("limits set", "--per"),
            ("ingest", "--progress-seconds"), ("partitions ensure", "--ahead"), ("demo", "--orders")} <= names
    result = cli(env, "status", "--limit", "-1")
    assert result.exit_code == 2 and "1064" not in result.output
    assert "'--limit': -1 is out of range: allowed 0 to 100,000" in result.stderr


@pytest.mark.parametrize(("args", "named"), [
    (("--seconds", "-5"), "-5 is out of range: allowed 0.001 to 86,400 seconds"),
    (("--seconds", "0"), "0 is out of range"),
    (("--once", "--seconds", "3"), "exactly one of --once, --dry-run or --seconds N; got --once and --seconds"),
    (("--dry-run", "--once"), "got --once and --dry-run"),
    ((), "exactly one of --once, --dry-run or --seconds N"),
])
def test_flush_flags_that_would_run_zero_ticks_or_conflict(flush_env, migrated, args, named):  # noqa: F811
    result = cli(flush_env, "flush", *args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], lines


@pytest.mark.parametrize(("variable", "url", "named"), [
    ("CONSOLIDATOR_SINK_URL", "kafka://127.0.0.1:9/t?max_message_bytes=abc",
     "max_message_bytes='abc' is out of range: allowed a whole number of bytes from 1 to 100,000,000"),
    ("CONSOLIDATOR_SINK_URL", "kafka://127.0.0.1:9/t?max_message_bytes=0", "max_message_bytes='0' is out of range"),
    ("CONSOLIDATOR_SINK_URL", "kafka://127.0.0.1:9/t?acks=all",
     "unknown kafka:// URL option 'acks' (it takes auth, region, max_message_bytes)"),
    ("CONSOLIDATOR_SINK_URL", "kafka://127.0.0.1:9/t?region=eu-west-1", "region is used only with auth=iam"),
    ("CONSOLIDATOR_SINK_URL", "kafka://b:9/t?auth=iam&region=Europe", "must be an AWS region"),
    ("CONSOLIDATOR_SINK_URL", "events://bus?detail_type=" + "d" * 129, "detail_type of 129 characters"),
    ("CONSOLIDATOR_SINK_URL", "events://bus?sorce=x", "unknown events:// URL option 'sorce'"),
    ("CONSOLIDATOR_SINK_URL", "file:///tmp/out.jsonl?fsync=1", "unknown file:// URL option 'fsync' (it takes none)"),
    ("CONSOLIDATOR_DEAD_LETTER_URL", "file:///tmp/dl.jsonl?x=1", "unknown file:// URL option 'x'"),
    ("CONSOLIDATOR_DATABASE_URL", "mysql://u:pw@127.0.0.1/db?ssl=maybe",
     "ssl='maybe' is not one of true, 1, required, false, 0"),
    ("CONSOLIDATOR_DATABASE_URL", "mysql://u:pw@127.0.0.1/db?sslmode=require",
     "unknown mysql:// URL option 'sslmode' (it takes ssl, ssl_ca)"),
    ("CONSOLIDATOR_DATABASE_URL", "mysql://u:pw@127.0.0.1/db?ssl=true&ssl=false", "given twice"),
    ("CONSOLIDATOR_REDIS_URL", "redis://:pw@127.0.0.1:6379/0?sslmode=on", "unknown redis:// URL option 'sslmode'"),
])
def test_url_options_are_checked_never_ignored(flush_env, variable, url, named):  # noqa: F811
    """A URL option the code would ignore (TLS believed on, a limit believed set) is refused at
    start-up, before any tick: exit 2, one line naming the variable and the option."""
    result = cli(flush_env | {variable: url}, "flush", "--once")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and variable in lines[0] and named in lines[0], lines
    assert "pw@" not in result.stderr and "Traceback" not in result.output


def test_the_store_reads_only_the_database_url_options_it_knows():
    """Refused by the store's own parser too (the demo and the Spark trackers read URLs without
    the settings model); the documented forms still read as before."""
    from consolidator.store.connection import ConnectionParams

    for url in ("mysql://u:pw@h/db?ssl=maybe", "mysql://u:pw@h/db?sslmode=require", "mysql://u:pw@h/db?ssl_ca="):
        with pytest.raises(ValueError, match="ssl"):
            ConnectionParams.from_url(url)
    for url, tls in (("mysql://u:pw@h/db?ssl=true", True), ("mysql://u:pw@h/db?ssl=0", False),
                     ("mysql://u:pw@h/db", False), ("mysql://u:pw@h/db?ssl=REQUIRED", True)):
        assert ConnectionParams.from_url(url).ssl is tls


@pytest.mark.parametrize("args", [("batch", "status", "nothex"), ("batch", "status", "0123456789ABCDEF0123456789ABCDEF"),
                                  ("batch", "ack", "nothex", "--index", "0"), ("dlq", "redrive", "--batch-id", "nothex")])
def test_malformed_batch_id_exit_1_with_a_json_error(flush_env, migrated, args):  # noqa: F811
    human = cli(flush_env, *args)
    assert human.exit_code == 1 and human.stdout == ""
    assert "not a batch id" in human.stderr and "32 lowercase hex characters" in human.stderr
    document = cli_json(flush_env, *args, exit_code=1)
    assert "not a batch id" in document["error"]


def test_unknown_batch_id_exit_1_with_a_json_error(flush_env, migrated):  # noqa: F811
    unknown = "0123456789abcdef0123456789abcdef"
    status = cli_json(flush_env, "batch", "status", unknown, exit_code=1)
    assert status["batch_id"] == unknown and "not tracked" in status["error"]
    redrive = cli(flush_env, "dlq", "redrive", "--batch-id", unknown)
    assert redrive.exit_code == 1, redrive.output
    assert f"unknown batch {unknown}" in redrive.stderr
    document = cli_json(flush_env, "dlq", "redrive", "--batch-id", unknown, exit_code=1)
    assert document["batches"]["unknown"] == [unknown] and document["ok"] is False


def test_db_migrate_create_for_a_missing_database(env, database_url):  # noqa: F811
    missing = database_url + "_missing"
    try:
        refused = cli(env | {"CONSOLIDATOR_DATABASE_URL": missing}, "db", "migrate")
        assert refused.exit_code == 1
        assert "does not exist" in refused.stderr and "--create" in refused.stderr
        assert "unavailable" not in refused.stderr
        created = cli_json(env | {"CONSOLIDATOR_DATABASE_URL": missing}, "db", "migrate", "--create")
        assert created["created"] is True and created["schema_version"] == max(created["applied"])
        again = cli_json(env | {"CONSOLIDATOR_DATABASE_URL": missing}, "db", "migrate", "--create")
        assert again == {"applied": [], "created": False, "schema_version": created["schema_version"]}
    finally:
        from consolidator.store.connection import ConnectionParams
        from consolidator.store.databases import drop_owned_database

        drop_owned_database(ConnectionParams.from_url(missing), "consolidator db migrate")


def test_usage_errors_are_one_line():
    result = cli({}, "no-such-command")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == ["usage error: No such command 'no-such-command'. (see 'root --help')"]


@pytest.mark.parametrize(("option", "url", "named"), [
    ("--database-url", "mysql://root:pw@127.0.0.1:3306/?sslmode=require", "unknown mysql:// URL option 'sslmode'"),
    ("--redis-url", "redis://:pw@127.0.0.1:6379/0?foo=bar", "unknown redis:// URL option 'foo'"),
])
def test_demo_url_options_are_checked_at_the_edge(option, url, named):
    """The demo's own URL options (it never reads the variables) get the variables' checks: one
    line, exit 2, before anything is created; a traceback before."""
    result = cli({}, "demo", option, url)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and named in lines[0], lines
    assert "pw@" not in result.stderr
