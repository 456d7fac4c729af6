"""``consolidator db``: the database schema."""

from __future__ import annotations

from typing import Annotated

import typer

from consolidator.cli.base import (
    JsonOption,
    emit_json,
    fail,
    guarded,
    load_settings,
    mysql_code,
    out,
    reads,
    store_for,
    wall_clock_ms,
)
from consolidator.rules.errors import StoreUnavailable

db_app = typer.Typer(help="Database schema.", no_args_is_help=True)

CREATOR = "consolidator db migrate"  # the ownership marker of a database `db migrate --create` made
UNKNOWN_DATABASE = 1049


@db_app.command("migrate", cls=reads("CleanupSettings"))
@guarded
def db_migrate(
    create: Annotated[bool, typer.Option(
        "--create", help="Create the database first when it does not exist (utf8mb4_bin); an existing "
                         "one is used as it is.")] = False,
    ledger_drained: Annotated[bool, typer.Option(
        "--ledger-drained", help="Confirm that Kafka will not deliver again any record at or below the "
                                 "pre-v4 ledger's highest offsets (the consumer group committed past them): "
                                 "the ledger is retired although it has gaps.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Create or upgrade the schema (idempotent: applies only the missing migrations). Exit 1
    when the database does not exist and --create was not given, or when a pre-v4 ledger may
    still decide re-delivered records and --ledger-drained was not given (the error names the
    partitions). The database user must be allowed to create tables (and, with --create, the
    database)."""
    store = store_for(load_settings("CleanupSettings"), migrating=True)
    now = wall_clock_ms()
    created = False
    if create:
        from consolidator.store.databases import create_owned_database_if_missing

        created = create_owned_database_if_missing(store.params, CREATOR, now)
    try:
        applied = store.migrate(now, ledger_drained)
    except StoreUnavailable as exc:
        if mysql_code(exc) != UNKNOWN_DATABASE:
            raise
        p = store.params
        raise fail(f"database {p.database!r} does not exist on {p.host}:{p.port}: run `consolidator db migrate"
                   " --create` to create it, or CREATE DATABASE it yourself (CHARACTER SET utf8mb4 COLLATE"
                   " utf8mb4_bin)", as_json, database=p.database) from None
    version = store.schema_version()
    if as_json:
        emit_json({"applied": applied, "schema_version": version} | ({"created": created} if create else {}))
    elif applied:
        out.print(("created database; " if created else "") + f"applied migrations {applied}; schema version {version}")
    else:
        out.print(f"schema is up to date (version {version})")
