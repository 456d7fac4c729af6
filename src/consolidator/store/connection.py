"""Connection to MySQL 8.0 / Aurora MySQL 3 / MariaDB 10.11, and the one place driver errors
are mapped: they leave this package as :class:`StoreError` or :class:`StoreUnavailable`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Self
from urllib.parse import parse_qs, unquote, urlsplit

import pymysql
import pymysql.cursors
from pymysql.constants import SERVER_STATUS
from pymysql.converters import escape_string

from consolidator.errors import StoreError, StoreUnavailable

# Client error codes meaning "the server is not there" rather than "this statement is wrong".
_UNAVAILABLE_CODES = {1040, 1045, 1049, 1053, 2002, 2003, 2005, 2006, 2013, 2055}


@dataclass(frozen=True)
class ConnectionParams:
    host: str
    port: int = 3306
    user: str = "root"
    password: str = ""
    database: str = "consolidator"
    ssl_ca: str | None = None
    ssl: bool = False

    @classmethod
    def from_url(cls, url: str) -> ConnectionParams:
        """``mysql://user:password@host:port/database?ssl=true&ssl_ca=/path/ca.pem``"""
        parts = urlsplit(url)
        if parts.scheme != "mysql" or not parts.hostname:
            raise ValueError(f"not a mysql:// URL with a host: {url!r}")
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        return cls(
            host=parts.hostname,
            port=parts.port or 3306,
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
            database=parts.path.lstrip("/") or "consolidator",
            ssl_ca=query.get("ssl_ca"),
            ssl=query.get("ssl", "false").lower() in ("1", "true", "required") or "ssl_ca" in query,
        )

    @classmethod
    def from_secret(cls, secret: dict) -> ConnectionParams:
        """An RDS-managed secret: host, port, username, password, dbname. TLS is always on."""
        return cls(
            host=secret["host"],
            port=int(secret.get("port", 3306)),
            user=secret["username"],
            password=secret["password"],
            database=secret.get("dbname", "consolidator"),
            ssl=True,
        )


def _string_quoter(connection: pymysql.connections.Connection):
    """Quote a str as an SQL literal the way the connection requires. Building multi-row VALUES
    lists directly costs a fraction of the driver's per-value formatting."""
    if connection.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES:
        return lambda text: "'" + text.replace("'", "''") + "'"
    return lambda text: "'" + escape_string(text) + "'"


def _string_escaper(connection: pymysql.connections.Connection) -> Callable[[str], str]:
    """Escape a str's body for a quoted SQL literal (the caller adds the quotes): one call per
    value on the ingest hot path, where a wrapper function costs as much as the escaping."""
    if connection.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES:
        return lambda text: text.replace("'", "''")
    return escape_string


def _multi_row(head: str, tail: str, rows: Iterable[str], max_bytes: int = 1_000_000) -> Iterator[str]:
    """Multi-row INSERT statements of at most ~``max_bytes`` each (under max_allowed_packet)."""
    values: list[str] = []
    size = 0
    for text in rows:
        if values and size + len(text) > max_bytes:
            yield head + ", ".join(values) + tail
            values, size = [], 0
        values.append(text)
        size += len(text) + 2
    if values:
        yield head + ", ".join(values) + tail


class Connection:
    """One connection, used by one thread at a time. Reconnects after the server went away."""

    def __init__(self, params: ConnectionParams, *, connect_timeout: int = 5, local_infile: bool = False):
        self.params = params
        self._connect_timeout = connect_timeout
        self._local_infile = local_infile
        self._connection: pymysql.connections.Connection | None = None

    @classmethod
    def from_url(cls, url: str, **kwargs) -> Self:
        return cls(ConnectionParams.from_url(url), **kwargs)

    def _connect(self) -> pymysql.connections.Connection:
        p = self.params
        ssl = None
        if p.ssl:
            ssl = {"ca": p.ssl_ca} if p.ssl_ca else {"check_hostname": False}
        return pymysql.connect(
            host=p.host,
            port=p.port,
            user=p.user,
            password=p.password,
            database=p.database,
            charset="utf8mb4",
            autocommit=False,
            connect_timeout=self._connect_timeout,
            read_timeout=60,
            write_timeout=60,
            ssl=ssl,
            local_infile=self._local_infile,
            init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
            cursorclass=pymysql.cursors.DictCursor,
        )

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except pymysql.err.MySQLError as exc:
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
            if isinstance(exc, pymysql.err.InterfaceError) or code in _UNAVAILABLE_CODES:
                self.close()
                raise StoreUnavailable(f"database unavailable: {exc}") from exc
            raise StoreError(f"database error: {exc}") from exc
        except OSError as exc:
            self.close()
            raise StoreUnavailable(f"database unavailable: {exc}") from exc

    @contextlib.contextmanager
    def transaction(self) -> Iterator[pymysql.cursors.DictCursor]:
        """A cursor inside one transaction: committed on success, rolled back on any error."""
        with self._errors():
            if self._connection is None or not self._connection.open:
                self._connection = self._connect()
            connection = self._connection
            try:
                with connection.cursor() as cursor:
                    yield cursor
                connection.commit()
            except BaseException:
                if connection.open:
                    try:
                        connection.rollback()
                    except pymysql.err.MySQLError:
                        connection.close()  # the original error below is what matters
                raise

    def close(self) -> None:
        if self._connection is not None and self._connection.open:
            self._connection.close()
        self._connection = None

    def ping(self) -> None:
        with self.transaction() as cur:
            cur.execute("SELECT 1")

def recreate_database(params: ConnectionParams) -> None:
    """Drop and create ``params.database`` (empty, utf8mb4_bin): for throwaway databases such
    as the local demo's. Never point this at a database that holds anything you need."""
    try:
        connection = pymysql.connect(
            host=params.host, port=params.port, user=params.user, password=params.password,
            connect_timeout=5, autocommit=True,
        )
    except pymysql.err.MySQLError as exc:
        raise StoreUnavailable(f"database unavailable: {exc}") from exc
    name = params.database
    if not name.replace("_", "").isalnum():
        raise StoreError(f"not a plain database name: {name!r}")
    try:
        with connection.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    except pymysql.err.MySQLError as exc:
        raise StoreError(f"could not recreate database {name!r}: {exc}") from exc
    finally:
        connection.close()
