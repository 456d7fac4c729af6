"""Shared fixtures: a fresh MariaDB database per test, Redis, and record/event factories."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator

import pymysql
import pytest
from support import LOCK_KEY, MYSQL_HOST, MYSQL_PASSWORD, MYSQL_PORT, MYSQL_USER, T0

from consolidator.rules.clock import ManualClock
from consolidator.store.mysql import ConnectionParams, MySQLStore

pytest_plugins = ["hard_bound"]

os.environ.setdefault("CONSOLIDATOR_LOCK_KEY", LOCK_KEY)  # inherited by every handler, CLI and worker the tests run


def _admin() -> pymysql.connections.Connection:
    return pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user=MYSQL_USER, password=MYSQL_PASSWORD,
                           autocommit=True)


@pytest.fixture
def database_url() -> Iterator[str]:
    """URL of a new, empty database, dropped after the test."""
    name = f"consolidator_test_{uuid.uuid4().hex[:10]}"
    with _admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    yield f"mysql://{MYSQL_USER}:{MYSQL_PASSWORD}@{MYSQL_HOST}:{MYSQL_PORT}/{name}"
    with _admin() as conn, conn.cursor() as cur:
        # a connection the test left in a transaction holds its tables' metadata locks, for which
        # DROP would wait a day: the teardown fails in 30 s instead, naming the connections
        cur.execute("SET SESSION lock_wait_timeout = 30")
        try:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
        except pymysql.err.OperationalError as error:
            cur.execute("SELECT id, host, command, time FROM information_schema.processlist WHERE db = %s", (name,))
            pytest.fail(f"{name} not dropped ({error}); connections still on it: {cur.fetchall()}")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def store(database_url: str, clock: ManualClock) -> Iterator[MySQLStore]:
    """A migrated store on a fresh database."""
    s = MySQLStore(ConnectionParams.from_url(database_url))
    s.migrate(clock.now_ms())
    yield s
    s.close()


@pytest.fixture(autouse=True)
def _restore_loggers() -> Iterator[None]:
    """Loading a Lambda handler inside a test copies Powertools' handler, bound to that test's
    captured stdout, and the function's level onto every registered logger (the project's, and
    libraries' such as py4j); put every logger back afterwards, so that a later test neither
    logs into a closed stream nor runs a library at a handler test's DEBUG level (py4j at DEBUG
    logs every command it sends: the Spark tests after such a test slowed down tenfold).
    Powertools' own service loggers (``consolidator-flush`` ...) keep their state."""
    def registered() -> dict[str, logging.Logger]:
        return {name: lg for name, lg in logging.root.manager.loggerDict.items()
                if isinstance(lg, logging.Logger) and not name.startswith("consolidator-")}

    saved = {name: (list(lg.handlers), lg.level, lg.propagate) for name, lg in registered().items()}
    yield
    for name, logger in registered().items():
        handlers, level, propagate = saved.get(name, ([], logging.NOTSET, True))
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


@pytest.fixture
def spans():
    """The product's tracer on, exporting to memory for one test (the exporter is the fixture's
    value); tracing off again after it."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from consolidator.support import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    yield exporter
    tracing.install(None)
