"""Helpers shared by the tests: connection settings of the local services and record factories.

Imported as ``support`` (a unique module name: each test folder has its own conftest.py)."""

from __future__ import annotations

import json
import os

from consolidator.rules.events import KafkaRecord
from consolidator.store.mysql import MySQLStore

MYSQL_HOST = os.environ.get("TEST_MYSQL_HOST", "127.0.0.1")
MYSQL_PORT = int(os.environ.get("TEST_MYSQL_PORT", "3306"))
MYSQL_USER = os.environ.get("TEST_MYSQL_USER", "root")
MYSQL_PASSWORD = os.environ.get("TEST_MYSQL_PASSWORD", "")
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
#: this run's flush lock (conftest.py sets CONSOLIDATOR_LOCK_KEY to it): two suites on one Redis
#: (a CI run beside a fresh-root check) never take or delete each other's lock
LOCK_KEY = f"consolidator-test-{os.getpid()}:flush-lock"
T0 = 1_795_000_000_000  # 2026-11-19T...Z, a fixed start for manual clocks

#: ``HYPOTHESIS_DEEP=1``: the slowest property tests run their full example counts (the deep run,
#: e.g. before a release or after a change to what they cover); unset, they run a third of them,
#: so that ``make test`` stays well inside CI's time. See docs/guide/quickstart.md.
DEEP = os.environ.get("HYPOTHESIS_DEEP", "") not in ("", "0")


def examples(full: int) -> int:
    """``max_examples`` of a property test whose deep run takes ``full`` examples."""
    return full if DEEP else max(1, full // 3)


def sql(store: MySQLStore, statement: str, args=None) -> list[dict]:
    """Run one statement on the test database and return its rows (for assertions)."""
    with store.transaction() as cur:
        cur.execute(statement, args)
        return list(cur.fetchall())


# A buffer row's effective state: its status, except that a CLAIMED row is in its batch's state
# (SENT and DEAD are written on the batch only). Select ``STATE AS status FROM ROWS`` (alias r).
STATE = "COALESCE(b.state, r.status)"
ROWS = "buffer_rows r LEFT JOIN batches b ON r.status = 'CLAIMED' AND b.batch_id = r.batch_id"


def order_value(location: str = "WH-42", order: str = "A001", items=(("SKU-1", 2),), **extra) -> bytes:
    body = {"location_id": location, "order_id": order,
            "items": [{"sku": s, "quantity": q} for s, q in items], **extra}
    return json.dumps(body).encode()


def record(offset: int, value: bytes | None = None, *, topic: str = "orders", partition: int = 0,
           timestamp_ms: int = T0, key: bytes | None = b"WH-42", **order) -> KafkaRecord:
    """A Kafka record; its value is an order event unless ``value`` is given."""
    return KafkaRecord(topic, partition, offset, timestamp_ms, key,
                       value if value is not None else order_value(**order))
