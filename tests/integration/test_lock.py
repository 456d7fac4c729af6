"""Redis lock: SET NX PX with a token, compare-and-delete release, typed error when Redis is down."""

from __future__ import annotations

import time
import uuid

import pytest
import redis
from support import REDIS_URL

from consolidator.rules.errors import LockUnavailable
from consolidator.store.lock import RedisLock


@pytest.fixture
def key():
    name = f"test-lock:{uuid.uuid4().hex}"
    yield name
    redis.Redis.from_url(REDIS_URL).delete(name)


def test_one_holder_at_a_time_and_release_frees_it(key):
    first = RedisLock.from_url(REDIS_URL, ttl_ms=5_000, key=key)
    second = RedisLock.from_url(REDIS_URL, ttl_ms=5_000, key=key)
    assert first.acquire() and first.token
    assert not second.acquire() and second.token is None
    pttl = first.client.pttl(key)
    assert 0 < pttl <= 5_000
    assert first.release()
    assert second.acquire()
    assert second.release()
    assert not second.release(), "a second release is a no-op"


def test_expired_lock_is_taken_over_and_the_late_release_leaves_it_alone(key):
    slow = RedisLock.from_url(REDIS_URL, ttl_ms=100, key=key)
    assert slow.acquire()
    time.sleep(0.25)
    fresh = RedisLock.from_url(REDIS_URL, ttl_ms=5_000, key=key)
    assert fresh.acquire(), "the TTL freed the lock"
    assert not slow.release(), "compare-and-delete: not our token any more"
    assert fresh.client.get(key) == fresh.token.encode()
    assert fresh.release()


def test_unreachable_redis_is_a_typed_error():
    lock = RedisLock.from_url("redis://127.0.0.1:1/0", ttl_ms=1_000, timeout_s=0.2)
    with pytest.raises(LockUnavailable):
        lock.acquire()


def test_ttl_must_be_positive():
    with pytest.raises(ValueError):
        RedisLock(redis.Redis.from_url(REDIS_URL), ttl_ms=0)
