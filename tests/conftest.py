"""Shared fixtures: a fresh MariaDB database per test, Redis, and record/event factories."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pymysql
import pytest
from support import MYSQL_HOST, MYSQL_PASSWORD, MYSQL_PORT, MYSQL_USER, T0

from consolidator.clock import ManualClock
from consolidator.store.mysql import ConnectionParams, MySQLStore


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
        cur.execute(f"DROP DATABASE IF EXISTS {name}")


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
    captured stdout, onto the project's module loggers (``consolidator.*``); put those back
    afterwards so a later test does not log into a closed stream. Powertools' own service
    loggers (``consolidator-flush`` ...) keep their state."""
    def ours() -> list[logging.Logger]:
        return [lg for name, lg in logging.root.manager.loggerDict.items()
                if isinstance(lg, logging.Logger) and (name == "consolidator" or name.startswith("consolidator."))]

    saved = {logger.name: (list(logger.handlers), logger.level, logger.propagate) for logger in ours()}
    yield
    for logger in ours():
        handlers, level, propagate = saved.get(logger.name, ([], logging.NOTSET, True))
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate
