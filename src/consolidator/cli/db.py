"""``consolidator db``: the database schema."""

from __future__ import annotations

import typer

from consolidator.cli.base import (
    JsonOption,
    emit_json,
    guarded,
    load_settings,
    out,
    store_for,
    wall_clock_ms,
)

db_app = typer.Typer(help="Database schema.", no_args_is_help=True)


@db_app.command("migrate")
@guarded
def db_migrate(as_json: JsonOption = False) -> None:
    """Create or upgrade the schema (idempotent: applies only the missing migrations)."""
    store = store_for(load_settings("CleanupSettings"), migrating=True)
    applied = store.migrate(wall_clock_ms())
    version = store.schema_version()
    if as_json:
        emit_json({"applied": applied, "schema_version": version})
    elif applied:
        out.print(f"applied migrations {applied}; schema version {version}")
    else:
        out.print(f"schema is up to date (version {version})")
