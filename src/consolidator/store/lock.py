"""The flush lock on Redis: ``SET key token NX PX ttl``, released by compare-and-delete.

An efficiency measure only: it makes one flusher the normal case. It guarantees nothing
about correctness, because a holder can pause past the TTL; the store's conditional
statements are what keep one event under one batch id.
"""

from __future__ import annotations

import secrets
import time

import redis

from consolidator.rules.errors import LockUnavailable

# Delete the key only if it still holds our token (a lock that expired and was taken by
# another flusher must not be released by us).
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

DEFAULT_KEY = "consolidator:flush-lock"


def lock_error(exc: redis.RedisError) -> LockUnavailable:
    """What went wrong with Redis, and what to do: a server that answered and refused (a wrong
    password, a database number it does not have, a command it refuses) is not an unreachable
    one, and its fix is in the URL, not in starting Redis."""
    if isinstance(exc, redis.AuthenticationError):
        why = (f"Redis refused the password: {exc} -> fix the AUTH token (CONSOLIDATOR_REDIS_URL's"
               " redis://:TOKEN@... or the secret of CONSOLIDATOR_REDIS_AUTH_SECRET_ARN)")
    elif isinstance(exc, redis.ResponseError) and "DB index" in str(exc):
        why = (f"Redis refused the database number of the URL: {exc} -> use one the server has in"
               " CONSOLIDATOR_REDIS_URL's /N (0 to 15 unless its `databases` setting says otherwise)")
    elif isinstance(exc, redis.ResponseError):
        why = f"Redis refused the lock command: {exc} -> check that the URL points at a Redis (or Valkey) server"
    else:
        why = f"Redis unreachable: {exc} -> check CONSOLIDATOR_REDIS_URL and that Redis is running"
    return LockUnavailable(why)


class RedisLock:
    """A lock with a random token per acquisition. Not reentrant; one holder object per flusher."""

    def __init__(self, client: redis.Redis, ttl_ms: int, key: str = DEFAULT_KEY) -> None:
        if ttl_ms <= 0:
            raise ValueError("the lock TTL must be positive")
        self.client = client
        self.ttl_ms = ttl_ms
        self.key = key
        self._token: str | None = None
        self._expires_at = 0.0  # monotonic: when the lock expires at the latest, by this process's clock
        self._release = client.register_script(_RELEASE)

    @classmethod
    def from_url(
        cls, url: str, ttl_ms: int, key: str = DEFAULT_KEY, timeout_s: float = 2.0, password: str | None = None
    ) -> RedisLock:
        """``password`` (an AUTH token) overrides one given in the URL."""
        options = {"password": password} if password else {}
        client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, **options)
        return cls(client, ttl_ms, key)

    @property
    def token(self) -> str | None:
        """The token of the current acquisition (None when not held by this object)."""
        return self._token

    def acquire(self) -> bool:
        """True when this object now holds the lock for ``ttl_ms``; False when someone else does.
        Raises :class:`LockUnavailable` (saying why: :func:`lock_error`) when Redis cannot be
        reached or refuses."""
        token = secrets.token_hex(16)
        started = time.monotonic()  # before the SET: Redis starts the TTL later, never earlier
        try:
            acquired = self.client.set(self.key, token, nx=True, px=self.ttl_ms)
        except redis.RedisError as exc:
            raise lock_error(exc) from exc
        self._token = token if acquired else None
        self._expires_at = started + self.ttl_ms / 1000
        return bool(acquired)

    def still_held(self) -> bool:
        """Whether this object still holds the lock: acquired, its TTL not over by this process's
        clock, and Redis still holding our token (not expired, not taken by another flusher, not
        lost with a Redis restart). False when Redis cannot be reached: the lock may be lost."""
        if self._token is None or time.monotonic() >= self._expires_at:
            return False
        try:
            return self.client.get(self.key) == self._token.encode()
        except redis.RedisError:
            return False

    def release(self) -> bool:
        """Delete the lock if it still holds our token. False when it had expired (and may now
        belong to another flusher, whose lock is left alone). Raises :class:`LockUnavailable`."""
        token, self._token = self._token, None
        if token is None:
            return False
        try:
            return bool(self._release(keys=[self.key], args=[token]))
        except redis.RedisError as exc:
            raise lock_error(exc) from exc
