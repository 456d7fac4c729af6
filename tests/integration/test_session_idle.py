"""A client that vanishes inside a transaction (its host gone, the network cut) does not keep
the transaction's row locks for the server's default 8 hours: the server ends a session that
has sent nothing for ``session_idle_s``. The client reconnects before a transaction once its
connection has been idle for most of that, so the limit never fails a write of its own."""

from __future__ import annotations

import time

import pymysql
import pytest

from consolidator.rules.errors import StoreConflict
from consolidator.store.connection import Connection, ConnectionParams


@pytest.fixture
def params(database_url: str) -> ConnectionParams:
    params = ConnectionParams.from_url(database_url)
    setup = Connection(params)
    with setup.transaction() as cur:
        cur.execute("CREATE TABLE marks (p INT PRIMARY KEY, high BIGINT)")
        cur.execute("INSERT INTO marks VALUES (0, 10)")
    setup.close()
    return params


def test_a_client_silent_inside_a_transaction_releases_its_locks_within_the_session_idle_bound(params):
    vanished = Connection(params, session_idle_s=2)
    cm = vanished.transaction()  # entered and never left: the client stops talking, locks held
    cur = cm.__enter__()
    cur.execute("SELECT high FROM marks WHERE p = 0 FOR UPDATE")
    started = time.monotonic()
    other = Connection(params)
    try:
        with other.transaction() as cur2:
            cur2.execute("SET SESSION innodb_lock_wait_timeout = 15")
            cur2.execute("UPDATE marks SET high = 11 WHERE p = 0")  # waits for the row lock
    except StoreConflict as error:
        pytest.fail(f"the silent client's lock was still held after {time.monotonic() - started:.0f} s: {error}")
    finally:
        other.close()
    assert time.monotonic() - started < 10
    with pytest.raises(pymysql.err.MySQLError):
        cur.execute("SELECT 1")  # the server ended the silent session


def test_a_connection_idle_past_the_bound_is_renewed_before_its_next_transaction(params):
    connection = Connection(params, session_idle_s=2)
    with connection.transaction() as cur:
        cur.execute("SELECT CONNECTION_ID() AS id")
        first = cur.fetchone()["id"]
    time.sleep(2.5)  # the server ends the session at 2 s
    with connection.transaction() as cur:  # a new session, not a failed write
        cur.execute("SELECT CONNECTION_ID() AS id")
        assert cur.fetchone()["id"] != first
    with connection.transaction() as cur:  # used within the bound: the same session
        cur.execute("SELECT CONNECTION_ID() AS id")
        second = cur.fetchone()["id"]
    with connection.transaction() as cur:
        cur.execute("SELECT CONNECTION_ID() AS id")
        assert cur.fetchone()["id"] == second
    connection.close()
