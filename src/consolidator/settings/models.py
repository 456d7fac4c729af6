"""The settings model of each runtime: what one Lambda function, CLI command, Spark job or the
worker reads, composed of the concerns it needs (each declared once, in its own module).
``USED_BY`` names the runtime for the configuration reference (``CLI``: operator commands only)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from consolidator.settings.base import KafkaTopic, Root, Seconds, reaches
from consolidator.settings.connections import _Base, _DeadLetter, _Sink
from consolidator.settings.fields import _Fields
from consolidator.settings.kafka import _KafkaBootstrap, _KafkaConsumer
from consolidator.settings.policy import _Policy
from consolidator.settings.urls import DatabaseUrl, DeadLetterUrl, RedisUrl, SecretArn, SinkUrl
from consolidator.settings.value_format import _Format
from consolidator.settings.worker import _WorkerIngest, _WorkerProcess


class IngestSettings(_DeadLetter, _Format, _Fields, _Base):
    """What the ingest function needs."""

    USED_BY: ClassVar[str] = "ingest"

    consumer_group: str | None = Field(
        None, min_length=1, max_length=200,
        description="the consumer group the records come through, for the ingest spans"
                    " (messaging.consumer.group.name): the stack sets it to the MSK event source mapping's group"
                    " (msk.consumer_group_id), which an MSK event does not carry; unset: the spans name none. The"
                    " worker names its own group (KAFKA_GROUP_ID) instead")


class FlushSettings(_Policy, _Sink, _DeadLetter, _Fields, _Base):
    """What the flush function needs."""

    USED_BY: ClassVar[str] = "flush"

    redis_url: RedisUrl = Field(repr=False, description="redis://host:6379/0 or rediss:// for TLS: the flush lock")
    redis_auth_secret_arn: SecretArn | None = Field(
        None, description="Secrets Manager secret whose string is the Redis AUTH token (ElastiCache, Valkey)"
    )
    max_attempts: int = Field(
        5, ge=1, le=100, json_schema_extra=reaches(deployed=True),
        description="failed publishes (the sink refused or did not confirm) before a batch becomes DEAD; a flusher"
                    " that dies after sending is not a failure")
    lock_ttl_seconds: Seconds = Field(60, le=900, description="Redis lock TTL; set it to the flush timeout")
    lock_key: str = Field("consolidator:flush-lock", min_length=1, max_length=200, pattern=r"^\S+$",
                          description="Redis key of the flush lock; deployments that share a Redis need different keys")
    max_rows_per_tick: int = Field(
        20_000, gt=0, le=1_000_000, json_schema_extra=reaches(deployed=True),
        description="rows claimed or re-published per tick, at most (one batch may overshoot it)")

    completion_tracking: bool = Field(
        False, description="seal each batch before its first publish so downstream can acknowledge its members"
    )


class PolicySettings(_Policy, _Base):
    """The database and the flush policy, nothing else."""

    USED_BY: ClassVar[str] = "CLI"


class FlushDryRunSettings(FlushSettings):
    """What ``flush --dry-run`` reads: every flush setting, each checked as ``flush --once``
    checks it, so a dry run that passes means the flush starts; the destinations may be unset
    (a dry run needs only the database)."""

    USED_BY: ClassVar[str] = "CLI"

    sink_url: SinkUrl | None = Field(None, repr=False, description=FlushSettings.model_fields["sink_url"].description)
    dead_letter_url: DeadLetterUrl | None = Field(
        None, repr=False, description=FlushSettings.model_fields["dead_letter_url"].description)
    redis_url: RedisUrl | None = Field(None, repr=False, description=FlushSettings.model_fields["redis_url"].description)


class LimitSettings(_Policy, _Base):
    """What ``consolidator limits`` and ``status`` need: the database and the default rate limit."""

    USED_BY: ClassVar[str] = "CLI"


class CleanupSettings(_Base):
    """What the cleanup function needs."""

    USED_BY: ClassVar[str] = "cleanup"

    retention_months: int = Field(
        3, ge=1, le=120, json_schema_extra=reaches(deployed=True),
        description="partitions older than this are dropped (only when fully sent)")
    partitions_ahead: int = Field(
        3, ge=1, le=24, json_schema_extra=reaches(deployed=True),
        description="months of partitions kept ready ahead")

    completion_max_age_seconds: Seconds = Field(
        7 * 86_400, le=10 * 365 * 86_400, description="trackers never completed after this long are removed (orphans)"
    )


class MigrateSettings(CleanupSettings):
    """What the migrate function needs: the master user's database settings, and the secret of
    each function's own database user (consolidator.store.users.GRANTS names the roles)."""

    USED_BY: ClassVar[str] = "migrate"

    database_users: dict[str, SecretArn] = Field(
        default_factory=dict,
        description='JSON {"ingest": "<secret ARN>", "flush": ..., "acks": ..., "cleanup": ...}: after the schema,'
                    " the migration creates or updates each function's own database user from its secret (user"
                    " name and password) with only that function's grants (docs/security.md)",
    )


class BatchViewSettings(_Fields, _Base):
    """What ``consolidator batch show`` and ``batch list`` read: the database, and the event shape
    (field names, ``AGGREGATE``, ``MEMBER_PAYLOAD``) a batch's aggregates are computed with."""

    USED_BY: ClassVar[str] = "CLI"


class CompletionSettings(_Base):
    """What reading completion trackers needs (``consolidator batch list``)."""

    USED_BY: ClassVar[str] = "CLI"

    completion_deadline_seconds: Seconds = Field(
        3600, le=365 * 86_400, description="a sent batch not complete this long after its seal is overdue"
                                           " (IncompleteBatches)"
    )


class AckSettings(CompletionSettings):
    """What the acks function (and ``consolidator batch ack``) needs."""

    USED_BY: ClassVar[str] = "acks"

    completion_sink_url: SinkUrl = Field(
        repr=False, description="kafka://, sqs://, events:// or file:// destination of completion messages"
    )
    completion_lease_seconds: Seconds = Field(
        60, le=86_400, description="a completion not confirmed by its sink after this long is re-published (same id)"
    )


class StreamSettings(_Policy, _Sink, _DeadLetter, _Format, _Fields, _KafkaBootstrap):
    """What ``consolidator spark stream`` needs (its options override these, same names and units).
    Kafka (KAFKA_BOOTSTRAP, SOURCE_TOPIC) is the source unless the command reads files (``--input``)."""

    USED_BY: ClassVar[str] = "spark stream"

    source_topic: KafkaTopic | None = Field(
        None, description="the topic the streaming job reads",
        json_schema_extra=reaches(spark=("stream",), option="--topic"))
    completion_database_url: DatabaseUrl | None = Field(
        None, repr=False, json_schema_extra=reaches(spark=("stream",)),
        description="Completion tracking: seal every Spark-built batch in this database (mysql://...) before it is"
                    " published, so the acks function tracks them too. With COMPLETION_DATABASE_SECRET_ARN: host,"
                    " port, database and TLS only (no user)")
    completion_database_secret_arn: SecretArn | None = Field(
        None, json_schema_extra=reaches(spark=("stream",)),
        description="Completion tracking with the trackers' database secret (RDS format), read by each executor: no"
                    " password in the job's arguments; COMPLETION_DATABASE_URL then gives host, port, database, TLS")

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

    USED_BY: ClassVar[str] = "worker"


class WorkerFlushSettings(_WorkerProcess, FlushSettings):
    """What ``consolidator worker --role flush`` needs: the flush service's settings."""

    USED_BY: ClassVar[str] = "worker"


class WorkerSettings(_WorkerIngest, _KafkaConsumer, _Format, FlushSettings):
    """What ``consolidator worker`` (``--role all``) needs: both of the above."""

    USED_BY: ClassVar[str] = "worker"


class ReplaySettings(_Policy, _Format, _Fields):
    """What ``consolidator spark replay`` needs: the policy (each grid candidate is checked as an
    override of it) and the field names."""

    USED_BY: ClassVar[str] = "spark replay"


class EmrSettings(Root):
    """What ``consolidator spark emr-submit`` needs (the EMR construct's outputs)."""

    USED_BY: ClassVar[str] = "spark emr-submit"

    emr_application_id: str = Field(
        min_length=1, max_length=64, pattern=r"^[0-9a-z]+$",
        json_schema_extra=reaches(spark=("emr-submit",), option="--application-id"),
        description="the EMR Serverless application (the EMR construct's output)")
    emr_job_role_arn: str = Field(
        pattern=r"^arn:aws[a-z-]*:iam::\d*:role/\S+$",
        json_schema_extra=reaches(spark=("emr-submit",), option="--execution-role-arn"),
        description="the streaming job's execution role (the EMR construct's output)")
    emr_bucket: str = Field(
        min_length=3, max_length=63, pattern=r"^[a-z0-9][a-z0-9.-]+$",
        json_schema_extra=reaches(spark=("emr-submit",), option="--bucket"),
        description="Bucket of the EMR construct (code/, checkpoints/, logs/)")
