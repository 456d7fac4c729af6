"""Fixtures of the worker's tests: a mock Kafka, a database proxy, the settings of one test's
worker (a migrated database of its own, its own consumer group and Redis lock key)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import MYSQL_HOST, MYSQL_PORT, REDIS_URL
from worker_support import MockKafka, TcpProxy

from consolidator.store.mysql import MySQLStore


@pytest.fixture
def kafka() -> Iterator[MockKafka]:
    yield MockKafka()


@pytest.fixture
def db_proxy() -> Iterator[TcpProxy]:
    proxy = TcpProxy((MYSQL_HOST, MYSQL_PORT))
    yield proxy
    proxy.close()


@pytest.fixture
def topic() -> str:
    return f"orders-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def worker_env(store: MySQLStore, database_url: str, kafka: MockKafka, topic: str, tmp_path: Path) -> dict:
    """The settings of a worker of this test (a migrated database of its own, its own consumer
    group and lock key; KIP-848's protocol, which assigns in milliseconds on the mock cluster)."""
    return {
        "CONSOLIDATOR_DATABASE_URL": database_url,
        "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{tmp_path / 'dead.jsonl'}",
        "CONSOLIDATOR_SINK_URL": f"file://{tmp_path / 'out.jsonl'}",
        "CONSOLIDATOR_REDIS_URL": REDIS_URL,
        "CONSOLIDATOR_LOCK_KEY": f"test-worker:{uuid.uuid4().hex}",
        "CONSOLIDATOR_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "CONSOLIDATOR_SOURCE_TOPICS": topic,
        "CONSOLIDATOR_KAFKA_GROUP_ID": f"group-{uuid.uuid4().hex[:8]}",
        "CONSOLIDATOR_KAFKA_GROUP_PROTOCOL": "consumer",
        "CONSOLIDATOR_DEBOUNCE_SECONDS": "1",
        "CONSOLIDATOR_HARD_WINDOW_SECONDS": "30",
        "CONSOLIDATOR_TICK_INTERVAL_SECONDS": "0.5",
        "CONSOLIDATOR_EVENT_TTL_SECONDS": "0",
        "CONSOLIDATOR_WORKER_COMMIT_INTERVAL_SECONDS": "0.5",
    }
