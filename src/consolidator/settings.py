"""Typed settings read from environment variables (prefix ``CONSOLIDATOR_``).

Built when a handler or command starts, never at import time. Every variable is checked at
once: a missing or malformed one (non-finite or out-of-range numbers, URLs that do not parse or
do not fit their destination) raises one :class:`ConfigurationError` naming every offending
variable, with the credentials of URLs masked. URLs are parsed by pydantic's network types and
then checked against what the code that uses them needs; fields stay plain strings.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Self, TypeVar
from urllib.parse import parse_qs, urlsplit

from pydantic import (
    AfterValidator,
    AnyUrl,
    Field,
    MySQLDsn,
    RedisDsn,
    TypeAdapter,
    UrlConstraints,
    ValidationError,
    model_validator,
)
from pydantic_core import MultiHostUrl
from pydantic_settings import BaseSettings, SettingsConfigDict

from consolidator.errors import ConfigurationError
from consolidator.events import FieldNames
from consolidator.policy import MAX_RATE_BATCHES, Policy, RateLimit

ENV_PREFIX = "CONSOLIDATOR_"
SINK_SCHEMES = ("kafka", "sqs", "events", "file")
DEAD_LETTER_SCHEMES = ("sqs", "file")
DAY_SECONDS = 86_400

_URLS = {
    "mysql": TypeAdapter(MySQLDsn),
    "redis": TypeAdapter(RedisDsn),
    "kafka": TypeAdapter(Annotated[MultiHostUrl, UrlConstraints(allowed_schemes=["kafka"], host_required=True)]),
    "any": TypeAdapter(AnyUrl),
}
_SQS_PATH = re.compile(r"/\d{12}/[A-Za-z0-9_-]{1,80}(\.fifo)?")
_EVENT_BUS = re.compile(r"[A-Za-z0-9/._-]{1,256}")
_SECRET_ARN = re.compile(r"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d+:secret:[A-Za-z0-9/_+=.@-]+")


def _parse(kind: str, url: str):
    """``url`` parsed by pydantic's network type; its error message (never the input) otherwise."""
    try:
        return _URLS[kind].validate_python(url)
    except ValidationError as exc:
        raise ValueError(exc.errors()[0]["msg"]) from None


def _query(url: str) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlsplit(url).query).items()}


def _scheme(url: str, allowed: tuple[str, ...]) -> str:
    scheme = url.partition("://")[0] if "://" in url else ""
    if scheme not in allowed:
        raise ValueError(f"scheme must be one of {', '.join(s + '://' for s in allowed)}")
    return scheme


def _file_url(url: str) -> str:
    parts = urlsplit(url)
    if not parts.path or not ((parts.netloc or "") + parts.path).strip("/"):
        raise ValueError("file:// URL needs a path, e.g. file:///var/lib/consolidator/out.jsonl")
    return url


def _sqs_url(url: str) -> str:
    parsed = _parse("any", url)
    if not (parsed.host or "").startswith("sqs.") or not _SQS_PATH.fullmatch(parsed.path or ""):
        raise ValueError("must be sqs://sqs.<region>.amazonaws.com/<12-digit account>/<queue name>")
    return url


def check_database_url(url: str) -> str:
    """``mysql://user:password@host:port/database?ssl=true&ssl_ca=/path/ca.pem``"""
    _scheme(url, ("mysql",))
    _parse("mysql", url)
    from consolidator.store.connection import ConnectionParams

    try:
        params = ConnectionParams.from_url(url)  # the parser the store uses: same acceptance
    except ValueError:
        raise ValueError("not a mysql:// URL the store can read") from None
    if not params.database.replace("_", "").replace("-", "").replace("$", "").isalnum():
        raise ValueError("database name must be letters, digits, '_', '-' or '$'")
    if params.ssl_ca is not None and not Path(params.ssl_ca).is_file():
        raise ValueError(f"ssl_ca {params.ssl_ca!r} is not a readable file")
    return url


def check_redis_url(url: str) -> str:
    """``redis://[:token@]host:6379/0`` or ``rediss://`` (TLS), as redis-py reads it."""
    _scheme(url, ("redis", "rediss"))
    _parse("redis", url)
    db = urlsplit(url).path.strip("/")
    if db and not (db.isdigit() and int(db) < 2**31):
        raise ValueError(f"the path must be a database number, got {db!r:.40}")
    from redis.connection import parse_url

    try:
        parse_url(url)  # the parser redis-py uses
    except (ValueError, TypeError) as exc:
        raise ValueError(f"redis-py cannot read it: {str(exc)[:80]}") from None
    return url


def check_sink_url(url: str) -> str:
    """kafka://servers/topic[?auth=iam&region=..], sqs://, events://bus[?source=..], file://path"""
    scheme = _scheme(url, SINK_SCHEMES)
    if scheme == "kafka":
        path = _parse("kafka", url).path or ""
        if not re.fullmatch(r"/[A-Za-z0-9._-]{1,249}", path):
            raise ValueError("kafka:// URL needs servers and one topic: kafka://host:9092,host2:9092/topic")
        if _query(url).get("auth") not in (None, "iam"):
            raise ValueError("kafka:// auth must be 'iam' when given")
    elif scheme == "sqs":
        _sqs_url(url)
    elif scheme == "events":
        bus = urlsplit(url).netloc
        if not _EVENT_BUS.fullmatch(bus):
            raise ValueError("events:// URL needs an event bus name (letters, digits, / . _ -)")
    else:
        _file_url(url)
    return url


def check_dead_letter_url(url: str) -> str:
    return _sqs_url(url) if _scheme(url, DEAD_LETTER_SCHEMES) == "sqs" else _file_url(url)


def _check_arn(arn: str) -> str:
    if not _SECRET_ARN.fullmatch(arn):
        raise ValueError("must be a Secrets Manager secret ARN: arn:aws:secretsmanager:<region>:<account>:secret:<name>")
    return arn


DatabaseUrl = Annotated[str, AfterValidator(check_database_url)]
RedisUrl = Annotated[str, AfterValidator(check_redis_url)]
SinkUrl = Annotated[str, AfterValidator(check_sink_url)]
DeadLetterUrl = Annotated[str, AfterValidator(check_dead_letter_url)]
SecretArn = Annotated[str, AfterValidator(_check_arn)]
# Durations: finite, positive, and bounded so they convert to milliseconds without surprises.
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class _Base(BaseSettings):
    # an empty variable counts as unset: "X is required" rather than "X: not a URL (got '')"
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="ignore", env_ignore_empty=True)

    database_url: DatabaseUrl | None = Field(
        None, repr=False, description="mysql://user:password@host:3306/db[?ssl=true|ssl_ca=/path/ca.pem]"
    )
    database_secret_arn: SecretArn | None = Field(
        None, description="Secrets Manager secret (RDS format) used when DATABASE_URL is unset"
    )

    # -- metrics (issue 10) -------------------------------------------------------------------
    environment: str = Field(
        "local", pattern=r"^[a-z][a-z0-9-]{0,20}$",
        description="Deployment name (dev, staging, prod); every metric carries it as the environment dimension",
    )

    @model_validator(mode="after")
    def _one_database_source(self) -> Self:
        if not (self.database_url or self.database_secret_arn):
            raise ValueError(_NO_DATABASE)
        return self


_NO_DATABASE = f"set {ENV_PREFIX}DATABASE_URL or {ENV_PREFIX}DATABASE_SECRET_ARN"


class _DeadLetter(BaseSettings):
    dead_letter_url: DeadLetterUrl = Field(
        repr=False, description="sqs://sqs.<region>.amazonaws.com/<account>/<queue> or file:///path.jsonl")


class _Fields(BaseSettings):
    group_key_field: str = Field("location_id", min_length=1)
    item_id_field: str = Field("order_id", min_length=1)
    items_field: str = Field("items", min_length=1)
    sku_field: str = Field("sku", min_length=1)
    quantity_field: str = Field("quantity", min_length=1)
    max_event_bytes: int = Field(256 * 1024, gt=0, le=6 * 1024 * 1024)  # Lambda's payload limit

    def field_names(self) -> FieldNames:
        return FieldNames(
            group_key=self.group_key_field,
            item_id=self.item_id_field,
            items=self.items_field,
            sku=self.sku_field,
            quantity=self.quantity_field,
        )


class _Policy(BaseSettings):
    debounce_seconds: Seconds = Field(300, le=31 * DAY_SECONDS)
    hard_window_seconds: Seconds = Field(1800, le=31 * DAY_SECONDS)
    max_batch_size: int = Field(500, gt=0, le=10_000)
    tick_interval_seconds: Seconds = Field(30, le=900)

    def policy(self) -> Policy:
        return Policy(
            debounce_ms=round(self.debounce_seconds * 1000),
            hard_window_ms=round(self.hard_window_seconds * 1000),
            max_batch_size=self.max_batch_size,
            tick_interval_ms=round(self.tick_interval_seconds * 1000),
            rate_limit=self.rate_limit(),
            ttl_ms=round(self.event_ttl_seconds * 1000),
        )

    # Rate limit and event time-to-live (docs/semantics.md section 7).
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

    redis_url: RedisUrl = Field(repr=False, description="redis://host:6379/0 or rediss:// for TLS")
    redis_auth_secret_arn: SecretArn | None = Field(
        None, description="Secrets Manager secret whose string is the Redis AUTH token"
    )
    sink_url: SinkUrl = Field(repr=False, description="kafka://, sqs://, events:// or file:// destination of batches")
    max_attempts: int = Field(5, ge=1, le=100)
    lock_ttl_seconds: Seconds = Field(60, le=900, description="Redis lock TTL; set it to the flush timeout")
    max_rows_per_tick: int = Field(20_000, gt=0, le=1_000_000)

    # -- sink size limits (issue 10) ------------------------------------------------------------
    max_batch_bytes: int | None = Field(
        None, gt=0, le=100_000_000,
        description="Cap on one encoded batch message; a due claim is split into batches under it. "
                    "Default: the sink's per-message limit. Must not exceed that limit.",
    )

    # Batch completion tracking (issue 12)
    completion_tracking: bool = Field(
        False, description="seal each batch before its first publish so downstream can acknowledge its members"
    )


class PolicySettings(_Policy, _Base):
    """What ``flush --dry-run`` needs: the database and the flush policy, nothing else."""


class LimitSettings(_Policy, _Base):
    """What ``consolidator limits`` and ``status`` need: the database and the default rate limit."""


class CleanupSettings(_Base):
    """What the cleanup function needs."""

    retention_months: int = Field(3, ge=1, le=120)
    partitions_ahead: int = Field(3, ge=1, le=24)

    # Batch completion tracking (issue 12)
    completion_max_age_seconds: Seconds = Field(
        7 * 86_400, le=10 * 365 * 86_400, description="trackers never completed after this long are removed (orphans)"
    )


class MigrateSettings(CleanupSettings):
    """What the migrate function needs: the master user's database settings, and the secret of
    each function's own database user (consolidator.store.users.GRANTS names the roles)."""

    database_users: dict[str, SecretArn] = Field(
        default_factory=dict,
        description='JSON {"ingest": "<secret ARN>", "flush": ..., "acks": ..., "cleanup": ...}: the'
                    " users the migration creates, each with its secret's user name and password",
    )


class CompletionSettings(_Base):
    """What reading completion trackers needs (``consolidator batch list``)."""

    completion_deadline_seconds: Seconds = Field(
        3600, le=365 * 86_400, description="a sent batch not complete after this long is overdue (IncompleteBatches)"
    )


class AckSettings(CompletionSettings):
    """What the acks function (and ``consolidator batch ack``) needs."""

    completion_sink_url: SinkUrl = Field(
        repr=False, description="kafka://, sqs://, events:// or file:// destination of completion messages"
    )
    completion_lease_seconds: Seconds = Field(
        60, le=86_400, description="a completion not confirmed after this long is re-published (same id)"
    )


S = TypeVar("S", bound=BaseSettings)


def mask(value: object) -> str:
    """``value`` for an error message: URL credentials and secret query parameters masked,
    at most 120 characters."""
    text = value if isinstance(value, str) else repr(value)
    at = text.rfind("@")  # user:password@ ends at the last "@", whatever the password holds
    if at >= 0:
        scheme_end = text.find("://")
        start = scheme_end + 3 if 0 <= scheme_end < at else 0
        text = text[:start] + "***" + text[at:]
    text = re.sub(r"(?i)((?:password|passwd|pwd|token|secret|auth)=)[^&#]*", r"\1***", text)
    return repr(text if len(text) <= 120 else text[:117] + "...")


def _database_source_missing(model: type[BaseSettings]) -> bool:
    if not issubclass(model, _Base):
        return False
    names = {f"{ENV_PREFIX}DATABASE_URL", f"{ENV_PREFIX}DATABASE_SECRET_ARN"}
    return not any(value for name, value in os.environ.items() if name.upper() in names)


def load_settings(model: type[S]) -> S:
    """Read ``model`` from the environment, or raise one error naming every bad variable
    (credentials masked, never a traceback's worth of pydantic detail)."""
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
                problems.append(f"{name}: {message} (got {mask(error.get('input'))})")
            else:
                problems.append(message)
        if _database_source_missing(model) and _NO_DATABASE not in problems:
            problems.append(_NO_DATABASE)
        raise ConfigurationError("invalid configuration: " + "; ".join(problems)) from None
