"""Consumer-side dedupe: process each ``batch_id`` once, although batches arrive at least once.

Usage (downstream consumer)::

    dedupe = RedisDedupe.from_url("redis://cache:6379/0")
    outcome = dedupe.process_once(message["batch_id"], lambda: apply(message))
    if outcome is Outcome.IN_PROGRESS:
        ...  # another worker holds it right now: do not ack, let it come back later

It keys on ``batch_id`` alone, which every batch message carries whatever its schema version
(1, 1.1, 1.2 or 2: ``consolidator.rules.batch.schema_name``), so one dedupe serves consumers of all of them.

Guarantees:
- ``handler`` runs to success at most once per batch id within ``keep_ms`` (default 7 days,
  longer than any re-publish window), as long as it finishes within ``lease_ms``;
- a handler that raises releases the batch id, so a redelivery runs it again;
- a worker that dies mid-way holds the id until ``lease_ms`` passes, then it can be retried.
  So the effect is "once" when the handler itself is idempotent or transactional; if a
  handler can outlive its lease, make it idempotent (keyed by batch id) as well.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from enum import StrEnum

import redis

from consolidator.rules.errors import LockUnavailable

log = logging.getLogger(__name__)

# Finish or release only while the key still holds our lease token.
_FINISH = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], 'done', 'PX', ARGV[2])
  return 1
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class Outcome(StrEnum):
    PROCESSED = "processed"  # the handler ran now and succeeded
    DUPLICATE = "duplicate"  # already processed earlier: skip and acknowledge
    IN_PROGRESS = "in_progress"  # another worker holds its lease: retry later, do not acknowledge


class RedisDedupe:
    def __init__(self, client: redis.Redis, *, prefix: str = "consolidator:dedupe:",
                 lease_ms: int = 60_000, keep_ms: int = 7 * 24 * 3600 * 1000) -> None:
        if lease_ms <= 0 or keep_ms <= 0:
            raise ValueError("lease_ms and keep_ms must be positive")
        self.client = client
        self.prefix = prefix
        self.lease_ms = lease_ms
        self.keep_ms = keep_ms
        self._finish = client.register_script(_FINISH)
        self._release = client.register_script(_RELEASE)

    @classmethod
    def from_url(cls, url: str, **kwargs) -> RedisDedupe:
        return cls(redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2), **kwargs)

    def process_once(self, batch_id: str, handler: Callable[[], object]) -> Outcome:
        """Run ``handler`` unless ``batch_id`` was processed or is being processed.
        Exceptions of ``handler`` propagate (and release the id). Raises
        :class:`LockUnavailable` when Redis cannot be reached (nothing ran)."""
        key = self.prefix + batch_id
        token = "lease:" + secrets.token_hex(16)
        try:
            if not self.client.set(key, token, nx=True, px=self.lease_ms):
                state = self.client.get(key)
                return Outcome.DUPLICATE if state == b"done" else Outcome.IN_PROGRESS
        except redis.RedisError as exc:
            raise LockUnavailable(f"redis unavailable: {exc}") from exc
        try:
            handler()
        except BaseException:
            try:
                self._release(keys=[key], args=[token])
            except redis.RedisError as exc:  # the lease expires by itself; re-raise the handler's error
                log.warning("dedupe lease not released", extra={"batch_id": batch_id, "error": str(exc)})
            raise
        try:
            self._finish(keys=[key], args=[token, self.keep_ms])
        except redis.RedisError as exc:
            raise LockUnavailable(f"handler ran but its batch id was not recorded: {exc}") from exc
        return Outcome.PROCESSED

    def is_processed(self, batch_id: str) -> bool:
        try:
            return self.client.get(self.prefix + batch_id) == b"done"
        except redis.RedisError as exc:
            raise LockUnavailable(f"redis unavailable: {exc}") from exc
