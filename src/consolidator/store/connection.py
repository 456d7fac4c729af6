"""Connection to MySQL 8.0 / Aurora MySQL 3 / MariaDB 10.11, and the one place driver errors
are mapped: they leave this package as :class:`StoreError`, :class:`StoreUnavailable` or
:class:`StoreRefused`.

TLS, when on, is always verified: the server's certificate must chain to the configured CA file
(``ssl_ca``) or, by default, to the Amazon RDS CA bundle shipped in ``store/certs`` (source and
checksum in ``store/certs/README.md``), and must name the host connected to. A server that does
not offer TLS is refused.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import ssl
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Self
from urllib.parse import parse_qsl, unquote, urlsplit

import pymysql
import pymysql.cursors
from pymysql.constants import COMMAND, SERVER_STATUS
from pymysql.converters import escape_string

from consolidator.rules.errors import (
    SchemaOutdated,
    StoreConflict,
    StoreError,
    StoreLockWait,
    StoreRefused,
    StoreUnavailable,
)
from consolidator.rules.printable import echoed
from consolidator.support.redact import masked

log = logging.getLogger(__name__)

# Client error codes meaning "the server is not there" rather than "this statement is wrong".
_UNAVAILABLE_CODES = {1040, 1049, 1053, 2002, 2003, 2005, 2006, 2013, 2055}
ACCESS_DENIED = 1045  # wrong user or password: not an outage (see Connection._open)
SOCKET_ONLY_USER = 1698  # ER_ACCESS_DENIED_NO_PASSWORD: the user may log in only by the server's unix socket
LOCK_WAIT_TIMEOUT, DEADLOCK = 1205, 1213  # the transaction was rolled back
NO_SUCH_TABLE = 1146  # ER_NO_SUCH_TABLE: schema_migrations is missing in a database never migrated
SSL_NOT_OFFERED = 2026  # CR_SSL_CONNECTION_ERROR: TLS required, the server does not offer it
RDS_CA_BUNDLE = Path(__file__).with_name("certs") / "rds-ca-bundle.pem"
URL_OPTIONS = ("ssl", "ssl_ca")  # the query options of a mysql:// URL; any other is refused
SSL_ON, SSL_OFF = ("true", "1", "required"), ("false", "0")
# The server ends a session silent this long (its wait_timeout; default 8 hours): a client gone
# inside a transaction (host gone, network cut) frees its locks. Far above a pause in one.
SESSION_IDLE_S = 300
RENEW_AFTER = 0.8  # a connection idle for this share of the bound is renewed before a transaction


def plaintext_refusal(params: ConnectionParams) -> str | None:
    """Why a connection with ``params`` may not be made: it would carry the user's password in
    plaintext over the network (TLS off, a host other than this machine's loopback). None when TLS
    is on, or the server is this machine (a local run). For connections that must never go in
    plaintext, as the functions' (their secrets always turn TLS on) and Spark's completion
    tracking's do."""
    if params.ssl or params.host == "localhost" or _loopback(params.host):
        return None
    return (f"the connection to {params.host} would be plaintext (the password included): add ?ssl=true"
            " (TLS verified against the RDS CA bundle) or ?ssl_ca=/path/ca.pem to the mysql:// URL")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tls_context(ca_file: str | Path | None) -> ssl.SSLContext:
    """Verify the server certificate against ``ca_file`` (default: the RDS CA bundle) and the
    host name: no unverified fallback."""
    context = ssl.create_default_context(cafile=str(ca_file or RDS_CA_BUNDLE))
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    return context


@dataclass(frozen=True)
class ConnectionParams:
    """Where and as whom to connect. The password is never in the repr (nor in a log line or
    an error message that formats these parameters)."""

    host: str
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)
    database: str = "consolidator"
    ssl_ca: str | None = None
    ssl: bool = False

    @classmethod
    def from_url(cls, url: str) -> ConnectionParams:
        """``mysql://user:password@host:port/database?ssl=true&ssl_ca=/path/ca.pem``: ``ssl=true``
        verifies against the RDS CA bundle, ``ssl_ca`` against that file. Any other option, a
        repeated one, or an ``ssl`` value other than true/false/1/0/required is refused
        (ValueError naming it): an option the connection would ignore (``sslmode=require``,
        ``ssl=maybe``) would leave the connection in plaintext while its author believes TLS is on."""
        parts = urlsplit(url)
        if parts.scheme != "mysql" or not parts.hostname:
            raise ValueError(f"not a mysql:// URL with a host: {masked(url)!r}")
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        for name, _ in pairs:
            if name not in URL_OPTIONS:
                raise ValueError(f"unknown mysql:// URL option {echoed(name, 40)} (it takes {', '.join(URL_OPTIONS)})")
        query = dict(pairs)
        if len(query) != len(pairs):
            raise ValueError("a mysql:// URL option is given twice")
        ssl_text = query.get("ssl", "false").lower()
        if ssl_text not in SSL_ON + SSL_OFF:
            raise ValueError(f"mysql:// URL option ssl={echoed(query['ssl'], 40)} is not one of {', '.join(SSL_ON + SSL_OFF)}")
        if "ssl_ca" in query and (not query["ssl_ca"] or ssl_text in SSL_OFF and "ssl" in query):
            raise ValueError("mysql:// URL option ssl_ca needs a CA file path and turns TLS on (not with ssl=false)")
        return cls(
            host=parts.hostname,
            port=parts.port or 3306,
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
            database=parts.path.lstrip("/") or "consolidator",
            ssl_ca=query.get("ssl_ca"),
            ssl=ssl_text in SSL_ON or "ssl_ca" in query,
        )

    @classmethod
    def from_secret(cls, secret: dict) -> ConnectionParams:
        """An RDS-managed secret: host, port, username, password, dbname. TLS is always on,
        verified against the RDS CA bundle."""
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


def _json_escaper(connection: pymysql.connections.Connection) -> Callable[[bytes], str]:
    """The body of a quoted SQL literal (the caller adds the quotes) of JSON text as orjson
    writes it: UTF-8 with every character below U+0020 escaped by JSON, so only a backslash and
    a single quote need escaping (quotes doubled under NO_BACKSLASH_ESCAPES). Two replacements
    in C: ``escape_string``'s per-character table costs ~30 us on a 1 KB event, and it escapes
    each double quote, which the server then reads back one by one."""
    if connection.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES:
        return lambda text: text.replace(b"'", b"''").decode()
    return lambda text: text.replace(b"\\", b"\\\\").replace(b"'", b"\\'").decode()


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


class Pipeline:
    """At most one statement in flight on a transaction's connection: :meth:`send` returns at
    once, so the client can build the next statement while the server runs this one, and
    :meth:`wait` reads its result (raising its error). Nothing else may use the connection
    while a statement is in flight. Leaving the block on an error reads what is still in flight
    (its error is dropped: the first one propagates), so the transaction can roll back."""

    def __init__(self, cur: pymysql.cursors.Cursor):
        self._connection = cur.connection
        self._in_flight = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._in_flight:
            self._in_flight = False
            if exc_type is None:
                raise RuntimeError("a pipelined statement was never waited for")
            with contextlib.suppress(pymysql.err.MySQLError, OSError):
                self._connection._read_query_result()

    def send(self, statement: str) -> None:
        if self._in_flight:
            raise RuntimeError("wait for the statement in flight first")
        # encoded as pymysql's Connection.query does; the driver's own send, without its wait
        self._connection._execute_command(COMMAND.COM_QUERY,
                                          statement.encode(self._connection.encoding, "surrogateescape"))
        self._in_flight = True

    def wait(self) -> int:
        """The affected rows of the statement in flight (0 when there is none)."""
        if not self._in_flight:
            return 0
        self._in_flight = False
        return self._connection._read_query_result()

    def fetch(self) -> tuple[tuple, ...]:
        """The rows of the statement in flight, as tuples (none when nothing is in flight)."""
        if not self._in_flight:
            return ()
        self.wait()
        return self._connection._result.rows or ()


class Connection:
    """One connection, used by one thread at a time. Reconnects after the server went away."""

    def __init__(self, params: ConnectionParams, *, connect_timeout: int = 5, local_infile: bool = False,
                 credentials: Callable[[], ConnectionParams] | None = None, required_schema: int | None = None,
                 session_idle_s: int = SESSION_IDLE_S):
        """``credentials`` re-reads the connection parameters (the database secret) when the
        server rejects the current ones: see :meth:`_open`. ``required_schema``: each new
        connection first checks that the database's schema is at least that version and raises
        :class:`SchemaOutdated` otherwise (:meth:`_check_schema`); None (migrations, tests)
        checks nothing. ``session_idle_s``: the server ends the session after this long without a
        statement (:data:`SESSION_IDLE_S`); a transaction begun after ``RENEW_AFTER`` of it
        without one first opens a new connection, so the bound never fails a statement."""
        self.params = params
        self.session_idle_s = session_idle_s
        self._last_used = 0.0  # wall clock: it also runs while a Lambda environment is frozen
        self.required_schema = required_schema
        self._connect_timeout = connect_timeout
        self._local_infile = local_infile
        self._credentials = credentials
        self._tls: tuple[str | None, ssl.SSLContext] | None = None
        self._connection: pymysql.connections.Connection | None = None

    @classmethod
    def from_url(cls, url: str, **kwargs) -> Self:
        return cls(ConnectionParams.from_url(url), **kwargs)

    def _tls_context(self) -> ssl.SSLContext | None:
        if not self.params.ssl:
            return None
        if self._tls is None or self._tls[0] != self.params.ssl_ca:
            self._tls = (self.params.ssl_ca, tls_context(self.params.ssl_ca))
        return self._tls[1]

    def _open(self) -> pymysql.connections.Connection:
        """Connect. Access denied (1045) with a ``credentials`` source re-reads it once and
        retries: a rotated secret is picked up by a warm container. Still denied (or no source
        to re-read) raises :class:`StoreRefused` through :meth:`_errors`, never "unavailable"."""
        try:
            return self._connect()
        except pymysql.err.OperationalError as exc:
            if _code(exc) != ACCESS_DENIED or self._credentials is None:
                raise
        log.warning("database refused the credentials; re-reading them once",
                    extra={"user": self.params.user, "host": self.params.host})
        fresh = self._credentials()
        # the location and TLS of this connection stay; the credentials are what rotates
        self.params = replace(self.params, user=fresh.user, password=fresh.password)
        return self._connect()

    def _connect(self) -> pymysql.connections.Connection:
        p = self.params
        connection = pymysql.connect(
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
            ssl=self._tls_context(),
            local_infile=self._local_infile,
            init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
            cursorclass=pymysql.cursors.DictCursor,
        )
        try:
            with connection.cursor() as cursor:
                cursor.execute("SET SESSION wait_timeout = %s", (self.session_idle_s,))
        except BaseException:
            connection.close()
            raise
        return connection

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except pymysql.err.MySQLError as exc:
            code = _code(exc)
            cause = getattr(exc, "original_exception", None)
            if code == ACCESS_DENIED:
                self.close()
                again = " after re-reading the secret" if self._credentials else ""
                raise StoreRefused(f"database refused the credentials of user {self.params.user!r}{again}"
                                   f" (access denied, 1045): check the password in the database URL or"
                                   f" secret and the user's grants") from exc
            if code == SOCKET_ONLY_USER:
                self.close()
                raise StoreRefused(f"database refused user {self.params.user!r} (access denied, 1698): the server"
                                   " lets this user in only through its local unix socket (unix_socket or"
                                   " auth_socket authentication), never over the network with a password") from exc
            if code == SSL_NOT_OFFERED or isinstance(cause, ssl.SSLCertVerificationError):
                self.close()
                raise StoreRefused(f"database TLS refused: {cause or exc.args[-1]}; the server must offer"
                                   f" TLS with a certificate from the configured CA for host"
                                   f" {self.params.host!r}") from exc
            if isinstance(exc, pymysql.err.InterfaceError) or code in _UNAVAILABLE_CODES:
                self.close()
                raise StoreUnavailable(f"database unavailable: {exc}") from exc
            if code in (LOCK_WAIT_TIMEOUT, DEADLOCK):
                conflict = StoreLockWait if code == LOCK_WAIT_TIMEOUT else StoreConflict
                raise conflict(f"database conflict, rolled back: {exc}") from exc
            raise StoreError(f"database error: {exc}") from exc
        except OSError as exc:
            self.close()
            raise StoreUnavailable(f"database unavailable: {exc}") from exc

    @contextlib.contextmanager
    def transaction(self) -> Iterator[pymysql.cursors.DictCursor]:
        """A cursor inside one transaction: committed on success, rolled back on any error."""
        with self._errors():
            if time.time() - self._last_used > self.session_idle_s * RENEW_AFTER:
                self.close()  # the server may have ended the session; a new one, not a failed write
            if self._connection is None or not self._connection.open:
                self._connection = self._open()
                self._check_schema()
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
            finally:
                self._last_used = time.time()

    def _check_schema(self) -> None:
        """Refuse a database whose schema is older than ``required_schema``, in one line that says
        what to run; the connection is closed, so the next transaction checks again."""
        if self.required_schema is None:
            return
        try:
            with self._connection.cursor() as cur:
                try:
                    cur.execute("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations")
                    found = int(cur.fetchone()["v"])
                except pymysql.err.ProgrammingError as exc:
                    if _code(exc) != NO_SUCH_TABLE:
                        raise
                    found = 0
            self._connection.commit()
        except BaseException:
            self.close()  # not checked: the next transaction connects and checks again
            raise
        if found < self.required_schema:
            database = self.params.database
            self.close()
            raise SchemaOutdated(f"database {database!r} has schema version {found}; this Consolidator needs"
                                 f" version {self.required_schema}: run `consolidator db migrate` (in AWS the"
                                 " migrate function runs it at deploy) and start again")

    def close(self) -> None:
        if self._connection is not None and self._connection.open:
            self._connection.close()
        self._connection = None

    def ping(self) -> None:
        with self.transaction() as cur:
            cur.execute("SELECT 1")

def _code(exc: pymysql.err.MySQLError) -> int | None:
    return exc.args[0] if exc.args and isinstance(exc.args[0], int) else None

