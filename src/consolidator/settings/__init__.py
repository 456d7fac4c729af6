"""Typed settings: the one declaration of every setting's name, type, default, unit, bounds
and cross-setting rules (environment variables with the prefix ``CONSOLIDATOR_``).

Every runtime goes through these models: the Lambda handlers and the CLI read them from the
environment, the Spark jobs' options are overrides of them (same names, same units), and the CDK
environment files are validated by them at synth time. Built when a handler or command starts,
never at import time, by :func:`load_settings`: a missing, malformed or unknown variable
(non-finite or out-of-range numbers, URLs that do not parse or do not fit their destination, a
misspelt name) raises one :class:`ConfigurationError` naming every offending variable or option,
with the credentials of URLs masked. URL checks live in :mod:`consolidator.settings.urls`.
"""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import Field, TypeAdapter, ValidationError, field_validator, model_validator

from consolidator.rules.errors import ConfigurationError
from consolidator.rules.events import FieldNames
from consolidator.rules.policy import MAX_RATE_BATCHES, MAX_RATE_PERIOD_MS, Policy, RateLimit
from consolidator.rules.shape import (
    REFERENCE_SHAPE,
    Shape,
    default_outputs,
    parse_outputs,
    parse_payload,
)
from consolidator.rules.shape_spec import parse_path
from consolidator.settings.base import (
    DAY_SECONDS,
    ENV_PREFIX,
    OTHER_VARIABLES,
    KafkaTopic,
    Root,
    Seconds,
    SecondsOrOff,
    all_models,
    field_range,
    known_variables,
)
from consolidator.settings.kafka import _KafkaBootstrap, _KafkaConsumer
from consolidator.settings.loading import NAMES_ITS_FAULTS, load_settings, unknown_variables
from consolidator.settings.loading import NO_DATABASE as _NO_DATABASE
from consolidator.settings.urls import (
    DEAD_LETTER_SCHEMES,
    SINK_SCHEMES,
    DatabaseUrl,
    DeadLetterUrl,
    RedisUrl,
    SecretArn,
    SinkUrl,
    check_database_server_url,
    check_database_url,
    check_dead_letter_url,
    check_redis_url,
    check_sink_url,
    mask,
)
from consolidator.settings.value_format import _Format, check_glue_format
from consolidator.settings.worker import _WorkerIngest, _WorkerProcess

__all__ = [
    "DAY_SECONDS",
    "DEAD_LETTER_SCHEMES",
    "ENV_PREFIX",
    "OTHER_VARIABLES",
    "SINK_SCHEMES",
    "WINDOWS_RULE",
    "AckSettings",
    "BatchViewSettings",
    "CleanupSettings",
    "CompletionSettings",
    "ConfigurationError",
    "EmrSettings",
    "FlushDryRunSettings",
    "FlushSettings",
    "IngestSettings",
    "LimitSettings",
    "PolicySettings",
    "ReplaySettings",
    "StreamSettings",
    "WorkerFlushSettings",
    "WorkerIngestSettings",
    "WorkerSettings",
    "all_models",
    "allowed_range",
    "check_database_server_url",
    "check_database_url",
    "check_dead_letter_url",
    "check_glue_format",
    "check_redis_url",
    "check_setting",
    "check_sink_url",
    "known_variables",
    "load_settings",
    "mask",
    "setting_field",
    "unknown_variables",
]
MAX_RATE_PERIOD_SECONDS = MAX_RATE_PERIOD_MS / 1000  # 7 days; also the bound of `consolidator limits set --per`


SINK_TIMEOUT_MAX_SECONDS = 10.0


def sink_timeout_seconds(function_timeout_seconds: float | None) -> float:
    """How long one publish may wait for its sink: the one rule for every sink of every function.
    A third of the function's timeout, at most 10 s (10 s outside Lambda), so a slow destination
    fails its messages, never the invocation that still has to record the outcome."""
    if function_timeout_seconds is None:
        return SINK_TIMEOUT_MAX_SECONDS
    return min(SINK_TIMEOUT_MAX_SECONDS, function_timeout_seconds / 3)


class _Base(Root):
    database_url: DatabaseUrl | None = Field(
        None, repr=False, description="mysql://user:password@host:3306/db[?ssl=true|ssl_ca=/path/ca.pem]"
    )
    database_secret_arn: SecretArn | None = Field(
        None, description="Secrets Manager secret (RDS format) used when DATABASE_URL is unset"
    )

    function_timeout_seconds: Seconds | None = Field(
        None, le=900, description="The Lambda function's timeout (set by the stack); sinks wait a share of it")

    @property
    def sink_timeout_seconds(self) -> float:
        return sink_timeout_seconds(self.function_timeout_seconds)

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


class _DeadLetter(Root):
    dead_letter_url: DeadLetterUrl = Field(
        repr=False, description="sqs://sqs.<region>.amazonaws.com/<account>/<queue> or file:///path.jsonl")


class _Fields(Root):
    group_key_field: str = Field("location_id", min_length=1)
    item_id_field: str = Field("order_id", min_length=1)
    items_field: str = Field("items", min_length=1)
    sku_field: str = Field("sku", min_length=1)
    quantity_field: str = Field("quantity", min_length=1)
    max_event_bytes: int = Field(256 * 1024, gt=0, le=6 * 1024 * 1024)  # Lambda's payload limit
    event_time_field: str | None = Field(
        None, min_length=1,
        description="the path of each event's own time in its value (epoch ms or ISO-8601 with a zone): it drives"
                    " the TTL, the buffer's month and the batch's event times, and a value without it is poison"
                    " (`bad_event_time`); unset: the Kafka record timestamp",
    )

    # The event shape (issue 22, docs/events.md): both unset keep the version 1 message.
    aggregate: str | None = Field(
        None, min_length=1, json_schema_extra={NAMES_ITS_FAULTS: True},
        description="the batch's outputs: a JSON list of {name, op, path} (op count, sum, min, max, first, last,"
                    " distinct, group_sum with by and sum), inline or the path of a JSON file; unset: quantity"
                    " summed per sku",
    )
    member_payload: str = Field(
        "none", min_length=1,
        description="what each member of a batch carries of its newest event: none, full, or a JSON list of paths",
    )

    @field_validator("aggregate")
    @classmethod
    def _aggregate_parses(cls, value: str | None) -> str | None:
        if value is not None:
            parse_outputs(value)
        return value

    @field_validator("event_time_field")
    @classmethod
    def _event_time_is_a_path(cls, value: str | None) -> str | None:
        if value is not None:
            parse_path(value)
        return value

    @field_validator("member_payload")
    @classmethod
    def _payload_parses(cls, value: str) -> str:
        parse_payload(value)
        return value

    def shape(self) -> Shape:
        """The compiled event shape: the one place that decides whether it is the reference shape
        (neither an aggregation spec nor a member payload: the version 1 message)."""
        if self.aggregate is None and self.member_payload == "none":
            return REFERENCE_SHAPE
        outputs = (parse_outputs(self.aggregate) if self.aggregate is not None
                   else default_outputs(self.items_field, self.sku_field, self.quantity_field))
        full, paths = parse_payload(self.member_payload)
        return Shape(outputs, full, paths)

    def field_names(self) -> FieldNames:
        return FieldNames(
            group_key=self.group_key_field,
            item_id=self.item_id_field,
            items=self.items_field,
            sku=self.sku_field,
            quantity=self.quantity_field,
            shape=self.shape(),
            event_time=None if self.event_time_field is None else parse_path(self.event_time_field),
        )


class _Policy(Root):
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
    rate_limit_period_seconds: Seconds = Field(
        60, le=MAX_RATE_PERIOD_SECONDS, description="The period of RATE_LIMIT_BATCHES (a sliding window), at most 7 days"
    )
    event_ttl_seconds: SecondsOrOff = Field(
        21_600, le=365 * DAY_SECONDS,
        description="Rows whose newest event's record timestamp is older than this when they would be"
        " claimed go to the dead-letter destination as `expired`; 0 turns the TTL off",
    )

    def rate_limit(self) -> RateLimit | None:
        if not self.rate_limit_batches:
            return None
        return RateLimit(self.rate_limit_batches, round(self.rate_limit_period_seconds * 1000))

    @model_validator(mode="after")
    def _hard_window_not_shorter_than_debounce(self) -> Self:
        check_windows(self.debounce_seconds, self.hard_window_seconds)
        return self


def check_windows(debounce_seconds: float, hard_window_seconds: float) -> None:
    """The one cross-setting rule of the policy (docs/semantics.md section 3): a hard window
    shorter than the debounce would make the debounce unreachable, so it is refused."""
    if hard_window_seconds < debounce_seconds:
        raise ValueError(f"hard_window_seconds ({hard_window_seconds:g}) must be at least debounce_seconds"
                         f" ({debounce_seconds:g}): {WINDOWS_RULE}")


WINDOWS_RULE = "a group is flushed at the latest when its hard window ends, so a longer debounce would never apply"


class _Sink(Root):
    sink_url: SinkUrl = Field(repr=False, description="kafka://, sqs://, events:// or file:// destination of batches")

    # -- sink size limits (issue 10) ------------------------------------------------------------
    max_batch_bytes: int | None = Field(
        None, gt=0, le=100_000_000,
        description="Cap on one encoded batch message; a due claim is split into batches under it. "
                    "Default: the sink's per-message limit. Must not exceed that limit.",
    )


class IngestSettings(_DeadLetter, _Format, _Fields, _Base):
    """What the ingest function needs."""


class FlushSettings(_Policy, _Sink, _DeadLetter, _Fields, _Base):
    """What the flush function needs."""

    redis_url: RedisUrl = Field(repr=False, description="redis://host:6379/0 or rediss:// for TLS")
    redis_auth_secret_arn: SecretArn | None = Field(
        None, description="Secrets Manager secret whose string is the Redis AUTH token"
    )
    max_attempts: int = Field(5, ge=1, le=100)
    lock_ttl_seconds: Seconds = Field(60, le=900, description="Redis lock TTL; set it to the flush timeout")
    lock_key: str = Field("consolidator:flush-lock", min_length=1, max_length=200, pattern=r"^\S+$",
                          description="Redis key of the flush lock; deployments that share a Redis need different keys")
    max_rows_per_tick: int = Field(20_000, gt=0, le=1_000_000)

    # Batch completion tracking (issue 12)
    completion_tracking: bool = Field(
        False, description="seal each batch before its first publish so downstream can acknowledge its members"
    )


class PolicySettings(_Policy, _Base):
    """The database and the flush policy, nothing else."""


class FlushDryRunSettings(FlushSettings):
    """What ``flush --dry-run`` reads: every flush setting, each checked as ``flush --once``
    checks it, so a dry run that passes means the flush starts; the destinations may be unset
    (a dry run needs only the database)."""

    sink_url: SinkUrl | None = Field(None, repr=False, description=FlushSettings.model_fields["sink_url"].description)
    dead_letter_url: DeadLetterUrl | None = Field(
        None, repr=False, description=FlushSettings.model_fields["dead_letter_url"].description)
    redis_url: RedisUrl | None = Field(None, repr=False, description=FlushSettings.model_fields["redis_url"].description)


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


class BatchViewSettings(_Fields, _Base):
    """What ``consolidator batch show`` and ``batch list`` read: the database, and the event shape
    (field names, ``AGGREGATE``, ``MEMBER_PAYLOAD``) a batch's aggregates are computed with."""


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


class StreamSettings(_Policy, _Sink, _DeadLetter, _Format, _Fields, _KafkaBootstrap):
    """What ``consolidator spark stream`` needs (its options override these, same names and units).
    Kafka (KAFKA_BOOTSTRAP, SOURCE_TOPIC) is the source unless the command reads files (``--input``)."""

    source_topic: KafkaTopic | None = Field(None, description="the topic the streaming job reads")
    completion_database_url: DatabaseUrl | None = Field(
        None, repr=False, description="seal Spark-built batches in this database (completion tracking)")
    completion_database_secret_arn: SecretArn | None = Field(
        None, description="the trackers' database secret (RDS format), read by each executor: no password "
                          "in the job's arguments; COMPLETION_DATABASE_URL then gives host, port, database, TLS")

    @field_validator("completion_database_url")
    @classmethod
    def _trackers_over_tls(cls, value: str | None) -> str | None:
        """The executors connect from the cluster's network: never in plaintext, as the
        functions' connections (their secrets always turn TLS on); a loopback host (a local run)
        is this machine."""
        from consolidator.store.connection import ConnectionParams, plaintext_refusal

        if value is not None and (refusal := plaintext_refusal(ConnectionParams.from_url(value))):
            raise ValueError(refusal)
        return value


class WorkerIngestSettings(_WorkerIngest, _KafkaConsumer, IngestSettings):
    """What ``consolidator worker --role ingest`` needs: the Kafka source and the ingest service's
    settings (docs/worker.md)."""


class WorkerFlushSettings(_WorkerProcess, FlushSettings):
    """What ``consolidator worker --role flush`` needs: the flush service's settings."""


class WorkerSettings(_WorkerIngest, _KafkaConsumer, _Format, FlushSettings):
    """What ``consolidator worker`` (``--role all``) needs: both of the above."""


class ReplaySettings(_Policy, _Format, _Fields):
    """What ``consolidator spark replay`` needs: the policy (each grid candidate is checked as an
    override of it) and the field names."""


class EmrSettings(Root):
    """What ``consolidator spark emr-submit`` needs (the EMR construct's outputs)."""

    emr_application_id: str = Field(min_length=1, max_length=64, pattern=r"^[0-9a-z]+$")
    emr_job_role_arn: str = Field(pattern=r"^arn:aws[a-z-]*:iam::\d*:role/\S+$")
    emr_bucket: str = Field(min_length=3, max_length=63, pattern=r"^[a-z0-9][a-z0-9.-]+$")


def setting_field(name: str) -> tuple[type, object]:
    """(type, FieldInfo) of the setting ``name`` as a model declares it: for models that carry
    the same setting elsewhere (the CDK environment files), so its type, default and bounds are
    declared once."""
    for model in all_models():
        if name in model.model_fields:
            info = model.model_fields[name]
            return info.annotation, info
    raise KeyError(f"no settings model declares {name!r}")


def allowed_range(name: str) -> str:
    """The bounds of the number setting ``name``, e.g. ``0.001 <= x <= 2678400``."""
    return field_range(setting_field(name)[1])


def check_setting(name: str, value: object) -> object:
    """``value`` as the setting ``name`` accepts it (its type, finiteness and bounds), or a
    ValueError naming the value and the allowed range: for options that set the same quantity
    elsewhere (``consolidator limits set --per``)."""
    annotation, info = setting_field(name)
    try:
        return TypeAdapter(Annotated[annotation, info]).validate_python(value)
    except ValidationError as exc:
        shown = f"{value:g}" if isinstance(value, float) else repr(value)
        wrong = "is not a number" if exc.errors()[0]["type"].endswith("_parsing") else "is out of range"
        raise ValueError(f"{shown} {wrong}: allowed {allowed_range(name)}"
                         f" (as {ENV_PREFIX}{name.upper()})") from None
