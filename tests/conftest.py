"""Shared fixtures: a fresh MariaDB database per test, Redis, and record/event factories."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator

import pymysql
import pytest

from consolidator.clock import ManualClock
from consolidator.events import KafkaRecord
from consolidator.store.mysql import ConnectionParams, MySQLStore

MYSQL_HOST = os.environ.get("TEST_MYSQL_HOST", "127.0.0.1")
MYSQL_PORT = int(os.environ.get("TEST_MYSQL_PORT", "3306"))
MYSQL_USER = os.environ.get("TEST_MYSQL_USER", "root")
MYSQL_PASSWORD = os.environ.get("TEST_MYSQL_PASSWORD", "")
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
T0 = 1_795_000_000_000  # 2026-11-19T...Z, a fixed start for manual clocks


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


def sql(store: MySQLStore, statement: str, args=None) -> list[dict]:
    """Run one statement on the test database and return its rows (for assertions)."""
    with store.transaction() as cur:
        cur.execute(statement, args)
        return list(cur.fetchall())


def order_value(location: str = "WH-42", order: str = "A001", items=(("SKU-1", 2),), **extra) -> bytes:
    body = {"location_id": location, "order_id": order,
            "items": [{"sku": s, "quantity": q} for s, q in items], **extra}
    return json.dumps(body).encode()


def record(offset: int, value: bytes | None = None, *, topic: str = "orders", partition: int = 0,
           timestamp_ms: int = T0, key: bytes | None = b"WH-42", **order) -> KafkaRecord:
    """A Kafka record; its value is an order event unless ``value`` is given."""
    return KafkaRecord(topic, partition, offset, timestamp_ms, key,
                       value if value is not None else order_value(**order))
