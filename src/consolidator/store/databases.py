"""Databases the tools create and drop, and the only place that does: a tool drops a database
only when that tool created it.

Guarantees:

- A system schema of the server (``mysql``, ``information_schema``, ``performance_schema``,
  ``sys``, in any letter case) is never created, dropped or migrated into: :class:`DatabaseNotOwned`.
- :func:`create_owned_database` creates a database that does not exist yet and writes an
  ownership marker into it: one row naming the creating tool in the table ``consolidator_created_by``.
  It never takes over a database that exists.
- :func:`create_owned_database_if_missing` does the same unless the database exists (``consolidator
  db migrate --create``), and changes nothing in an existing one.
- :func:`drop_owned_database` drops a database only when its marker names the same tool. A
  database without the marker (anything the tool did not create: an application's database, a
  production buffer migrated by ``consolidator db migrate``) or with another tool's marker is
  refused with :class:`DatabaseNotOwned`, and nothing is changed.

The marker is written by these functions only; migrations never write or read it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pymysql

from consolidator.rules.errors import DatabaseNotOwned, StoreError, StoreUnavailable
from consolidator.store.connection import ConnectionParams, tls_context

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
MARKER_TABLE = "consolidator_created_by"
_NO_SUCH_TABLE = 1146


def refuse_system_schema(name: str, action: str) -> None:
    """Raise :class:`DatabaseNotOwned` when ``name`` is a system schema of the server."""
    if name.lower() in SYSTEM_SCHEMAS:
        raise DatabaseNotOwned(f"refusing to {action} {name!r}: it is a system schema of the database server")


def _checked_name(name: str, action: str) -> str:
    refuse_system_schema(name, action)
    if not name or not name.replace("_", "").isalnum():
        raise DatabaseNotOwned(f"refusing to {action} {name!r}: not a plain database name (letters, digits, '_')")
    return name


@contextlib.contextmanager
def _server(params: ConnectionParams) -> Iterator[pymysql.cursors.Cursor]:
    """A cursor on the server of ``params``, connected to no database."""
    try:
        connection = pymysql.connect(host=params.host, port=params.port, user=params.user, password=params.password,
                                     connect_timeout=5, autocommit=True,
                                     ssl=tls_context(params.ssl_ca) if params.ssl else None)
    except pymysql.err.MySQLError as exc:
        raise StoreUnavailable(f"database server {params.host}:{params.port} unavailable: {exc}") from exc
    try:
        with connection.cursor() as cur:
            yield cur
    except pymysql.err.MySQLError as exc:
        raise StoreError(f"database server {params.host}:{params.port}: {exc}") from exc
    finally:
        connection.close()


def _exists(cur, name: str) -> bool:
    cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (name,))
    return any(row[0] == name for row in cur.fetchall())  # the column compares without case


def _creator(cur, name: str) -> str | None:
    """The tool named by the marker of the existing database ``name``; None without a marker."""
    try:
        cur.execute(f"SELECT creator FROM `{name}`.`{MARKER_TABLE}` ORDER BY created_at_ms LIMIT 1")
    except pymysql.err.ProgrammingError as exc:
        if exc.args and exc.args[0] == _NO_SUCH_TABLE:
            return None
        raise
    row = cur.fetchone()
    return row[0] if row else None


def create_owned_database(params: ConnectionParams, creator: str, now_ms: int) -> None:
    """Create ``params.database`` (utf8mb4_bin) with the marker of ``creator``. An existing
    database is refused, whoever made it."""
    name = _checked_name(params.database, "create")
    with _server(params) as cur:
        if _exists(cur, name):
            raise DatabaseNotOwned(f"refusing to create database {name!r} on {params.host}:{params.port}:"
                                   f" it exists already")
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        try:
            cur.execute(f"CREATE TABLE `{name}`.`{MARKER_TABLE}` (creator VARCHAR(64) NOT NULL PRIMARY KEY,"
                        f" created_at_ms BIGINT NOT NULL) ENGINE=InnoDB"
                        f" COMMENT 'this database was created by {creator} and may be dropped by it'")
            cur.execute(f"INSERT INTO `{name}`.`{MARKER_TABLE}` (creator, created_at_ms) VALUES (%s, %s)",
                        (creator, now_ms))
        except pymysql.err.MySQLError:
            cur.execute(f"DROP DATABASE `{name}`")  # created a moment ago by this call, still empty
            raise


def create_owned_database_if_missing(params: ConnectionParams, creator: str, now_ms: int) -> bool:
    """Create ``params.database`` as :func:`create_owned_database` does unless it exists (False
    then: whoever made it, it is left as it is)."""
    name = _checked_name(params.database, "create")
    with _server(params) as cur:
        if _exists(cur, name):
            return False
    create_owned_database(params, creator, now_ms)
    return True


def drop_owned_database(params: ConnectionParams, creator: str) -> bool:
    """Drop ``params.database`` if its marker names ``creator``; False when it does not exist.
    Anything else is refused (:class:`DatabaseNotOwned`) and left as it is."""
    name = _checked_name(params.database, "drop")
    with _server(params) as cur:
        if not _exists(cur, name):
            return False
        owner = _creator(cur, name)
        if owner != creator:
            by = f"it was created by {owner}" if owner else "consolidator did not create it"
            raise DatabaseNotOwned(f"refusing to drop database {name!r} on {params.host}:{params.port}: {by}"
                                   f" (no {creator} marker in its table {MARKER_TABLE}); choose another name, or drop it"
                                   f" yourself if nothing in it is needed")
        cur.execute(f"DROP DATABASE `{name}`")
    return True


def recreate_owned_database(params: ConnectionParams, creator: str, now_ms: int) -> None:
    """A fresh, empty ``params.database`` for ``creator``: its own earlier one is dropped first;
    a database ``creator`` did not create is refused."""
    drop_owned_database(params, creator)
    create_owned_database(params, creator, now_ms)
