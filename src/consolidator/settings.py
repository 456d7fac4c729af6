"""Typed settings read from environment variables (prefix ``CONSOLIDATOR_``).

Built when a handler or command starts, never at import time. A missing or malformed
variable raises :class:`ConfigurationError` naming every offending variable.
"""

from __future__ import annotations

from typing import Self, TypeVar
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from consolidator.errors import ConfigurationError
from consolidator.events import FieldNames
from consolidator.policy import MAX_RATE_BATCHES, Policy, RateLimit

ENV_PREFIX = "CONSOLIDATOR_"
SINK_SCHEMES = ("kafka", "sqs", "events", "file")
DEAD_LETTER_SCHEMES = ("sqs", "file")


def _check_scheme(url: str, allowed: tuple[str, ...]) -> str:
    scheme = urlsplit(url).scheme
    if scheme not in allowed:
        raise ValueError(f"scheme must be one of {', '.join(s + '://' for s in allowed)}, got {url!r}")
    return url


class _Base(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="ignore")

    database_url: str | None = Field(
        None, description="mysql://user:password@host:3306/db[?ssl_ca=/path/ca.pem]"
    )
    database_secret_arn: str | None = Field(
        None, description="Secrets Manager secret (RDS format) used when DATABASE_URL is unset"
    )

    @model_validator(mode="after")
    def _one_database_source(self) -> Self:
        if not (self.database_url or self.database_secret_arn):
            raise ValueError("set DATABASE_URL or DATABASE_SECRET_ARN")
        return self

    @field_validator("database_url")
    @classmethod
    def _mysql_url(cls, url: str | None) -> str | None:
        return None if url is None else _check_scheme(url, ("mysql",))


class _DeadLetter(BaseSettings):
    dead_letter_url: str = Field(description="sqs://sqs.<region>.amazonaws.com/<account>/<queue> or file:///path.jsonl")

    @field_validator("dead_letter_url")
    @classmethod
    def _dead_letter_scheme(cls, url: str) -> str:
        return _check_scheme(url, DEAD_LETTER_SCHEMES)


class _Fields(BaseSettings):
    group_key_field: str = Field("location_id", min_length=1)
    item_id_field: str = Field("order_id", min_length=1)
    items_field: str = Field("items", min_length=1)
    sku_field: str = Field("sku", min_length=1)
    quantity_field: str = Field("quantity", min_length=1)
    max_event_bytes: int = Field(256 * 1024, gt=0)

    def field_names(self) -> FieldNames:
        return FieldNames(
            group_key=self.group_key_field,
            item_id=self.item_id_field,
            items=self.items_field,
            sku=self.sku_field,
            quantity=self.quantity_field,
        )


class _Policy(BaseSettings):
    debounce_seconds: float = Field(300, gt=0)
    hard_window_seconds: float = Field(1800, gt=0)
    max_batch_size: int = Field(500, gt=0, le=10_000)
    tick_interval_seconds: float = Field(30, gt=0)

    def policy(self) -> Policy:
        return Policy(
            debounce_ms=round(self.debounce_seconds * 1000),
            hard_window_ms=round(self.hard_window_seconds * 1000),
            max_batch_size=self.max_batch_size,
            tick_interval_ms=round(self.tick_interval_seconds * 1000),
            rate_limit=self.rate_limit(),
            ttl_ms=round(self.event_ttl_seconds * 1000),
        )

    # Rate limit and event time-to-live (SEMANTICS section 10).
    rate_limit_batches: int = Field(
        0, ge=0, le=MAX_RATE_BATCHES,
        description="Default limit: at most this many batches per group per period; 0 = no default limit"
        " (per-group overrides from `consolidator limits set` still apply)",
    )
    rate_limit_period_seconds: float = Field(
        60, gt=0, description="The period of RATE_LIMIT_BATCHES (a sliding window)"
    )
    event_ttl_seconds: float = Field(
        21_600, ge=0,
        description="Rows whose newest event's record timestamp is older than this when they would be"
        " claimed go to the dead-letter destination as `expired`; 0 turns the TTL off",
    )

    def rate_limit(self) -> RateLimit | None:
        if not self.rate_limit_batches:
            return None
        return RateLimit(self.rate_limit_batches, round(self.rate_limit_period_seconds * 1000))


class IngestSettings(_DeadLetter, _Fields, _Base):
    """What the ingest function needs."""


class FlushSettings(_Policy, _DeadLetter, _Fields, _Base):
    """What the flush function needs."""

    redis_url: str = Field(description="redis://host:6379/0 or rediss:// for TLS")
    redis_auth_secret_arn: str | None = Field(
        None, description="Secrets Manager secret whose string is the Redis AUTH token"
    )
    sink_url: str = Field(description="kafka://, sqs://, events:// or file:// destination of batches")
    max_attempts: int = Field(5, ge=1)
    lock_ttl_seconds: float = Field(60, gt=0, description="Redis lock TTL; set it to the flush timeout")
    max_rows_per_tick: int = Field(20_000, gt=0)

    @field_validator("sink_url")
    @classmethod
    def _sink_scheme(cls, url: str) -> str:
        return _check_scheme(url, SINK_SCHEMES)

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, url: str) -> str:
        return _check_scheme(url, ("redis", "rediss"))


class LimitSettings(_Policy, _Base):
    """What ``consolidator limits`` and ``status`` need: the database and the default rate limit."""


class CleanupSettings(_Base):
    """What the cleanup function needs."""

    retention_months: int = Field(3, ge=1)
    partitions_ahead: int = Field(3, ge=1)


S = TypeVar("S", bound=BaseSettings)


def load_settings(model: type[S]) -> S:
    """Read ``model`` from the environment, or raise one error naming every bad variable."""
    try:
        return model()
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            name = ENV_PREFIX + "_".join(str(p) for p in error["loc"]).upper() if error["loc"] else ""
            message = error["msg"].removeprefix("Value error, ")
            if error["type"] == "missing":
                problems.append(f"{name} is required but not set")
            elif name:
                problems.append(f"{name}: {message} (got {error.get('input')!r})")
            else:
                problems.append(message.replace("set DATABASE", f"set {ENV_PREFIX}DATABASE")
                                .replace("or DATABASE", f"or {ENV_PREFIX}DATABASE"))
        raise ConfigurationError("invalid configuration: " + "; ".join(problems)) from None
