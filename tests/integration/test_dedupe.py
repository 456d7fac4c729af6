"""Consumer-side dedupe on Redis: each batch id is processed once; failures and dead workers
release it for a retry."""

from __future__ import annotations

import time
import uuid

import pytest
import redis
from support import REDIS_URL

from consolidator.consumer.dedupe import Outcome, RedisDedupe
from consolidator.rules.errors import LockUnavailable


@pytest.fixture
def dedupe():
    prefix = f"test-dedupe:{uuid.uuid4().hex}:"
    d = RedisDedupe.from_url(REDIS_URL, prefix=prefix, lease_ms=200)
    yield d
    for key in d.client.scan_iter(prefix + "*"):
        d.client.delete(key)


def test_each_batch_id_is_processed_once(dedupe):
    applied: list[str] = []
    assert dedupe.process_once("b1", lambda: applied.append("b1")) is Outcome.PROCESSED
    assert dedupe.process_once("b1", lambda: applied.append("b1")) is Outcome.DUPLICATE
    assert dedupe.process_once("b2", lambda: applied.append("b2")) is Outcome.PROCESSED
    assert applied == ["b1", "b2"]
    assert dedupe.is_processed("b1") and not dedupe.is_processed("b3")
    assert dedupe.client.pttl(dedupe.prefix + "b1") > 6 * 24 * 3600 * 1000  # kept for days


def test_a_failing_handler_releases_the_id_for_the_retry(dedupe):
    def boom():
        raise RuntimeError("downstream down")

    with pytest.raises(RuntimeError):
        dedupe.process_once("b1", boom)
    applied = []
    assert dedupe.process_once("b1", lambda: applied.append(1)) is Outcome.PROCESSED
    assert applied == [1]


def test_in_progress_elsewhere_then_retry_after_a_dead_worker_lease(dedupe):
    dedupe.client.set(dedupe.prefix + "b1", "lease:someone-else", px=dedupe.lease_ms)
    applied = []
    assert dedupe.process_once("b1", lambda: applied.append(1)) is Outcome.IN_PROGRESS
    time.sleep(dedupe.lease_ms / 1000 + 0.1)  # that worker died: its lease runs out
    assert dedupe.process_once("b1", lambda: applied.append(1)) is Outcome.PROCESSED
    assert applied == [1]


def test_unreachable_redis_runs_nothing():
    down = RedisDedupe(redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2))
    applied = []
    with pytest.raises(LockUnavailable):
        down.process_once("b1", lambda: applied.append(1))
    assert applied == []
