"""Per-environment settings of the CDK app: a typed, validated model read from JSON.

One file per environment under ``infra/environments/<name>.json``. Everything the stack
needs is here; constructs receive the parts they use as typed arguments, never context
lookups. Loading fails with one error naming every bad field.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Literal, Self
from urllib.parse import quote

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from consolidator.rules.shape import parse_outputs, parse_path, parse_payload
from consolidator.settings import (
    ENV_PREFIX,
    check_glue_format,
    check_windows,
    deployed_settings,
    setting_field,
)

ENVIRONMENTS_DIR = Path(__file__).resolve().parent.parent / "environments"

ACCOUNT = r"^\d{12}$"
ACK_SENDER = r"^(\d{12}|arn:aws[\w-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+)$"
MSK_CLUSTER_ARN = re.compile(r"^arn:aws[\w-]*:kafka:([a-z0-9-]+):(\d{12}):cluster/([\w-]+)/([\w-]+)$")


class ConfigError(ValueError):
    """An environment file is missing or invalid; the message names every bad field."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NetworkConfig(_Model):
    """Create a VPC (default) or import one by id with its subnets (no lookup: works offline)."""

    vpc_id: str | None = Field(None, pattern=r"^vpc-[0-9a-f]+$")
    vpc_cidr: str = "10.40.0.0/16"
    availability_zones: list[str] = Field(default_factory=list, description="required when importing or when account is set")
    max_azs: int = Field(2, ge=2, le=3)
    nat_gateways: int = Field(1, ge=0, le=3)
    private_subnet_ids: list[str] = Field(default_factory=list, description="imported VPC: subnets with egress for functions")
    isolated_subnet_ids: list[str] = Field(default_factory=list, description="imported VPC: subnets for database and cache")
    interface_endpoints: bool = Field(True, description="Secrets Manager and SQS endpoints in the VPC")
    flow_log_retention_days: int = 30

    @model_validator(mode="after")
    def _import_complete(self) -> Self:
        if self.vpc_id:
            zones = len(self.availability_zones)
            if zones < 2 or len(self.private_subnet_ids) != zones or len(self.isolated_subnet_ids) != zones:
                raise ValueError(
                    "an imported VPC needs availability_zones (>= 2) and one private and one "
                    "isolated subnet id per zone"
                )
        return self


SECRET_ARN = r"^arn:aws[\w-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[\w/+=.@-]+$"
GLUE_REGISTRY_ARN = re.compile(r"^arn:aws[\w-]*:glue:([a-z0-9-]+):(\d{12}):registry/([A-Za-z0-9_$#.-]+)$")


class SchemaRegistryConfig(_Model):
    """The topic's values are in a schema registry's format (README: value formats). Either the
    ingest function decodes them (``decode_in: function``: consolidator.sources.formats, a
    Confluent-compatible registry or Glue) or the event source mapping does (``event_source_mapping``:
    provisioned mode, which the mapping always uses here; it hands the function JSON values, and
    a record it cannot validate goes to the mapping's on-failure queue, never dropped)."""

    value_format: setting_field("value_format")[0] = Field(  # the runtime's type: consolidator.settings
        description="avro, protobuf or json-schema (plain JSON: no schema_registry)")
    decode_in: Literal["function", "event_source_mapping"] = "function"
    confluent_url: str | None = Field(None, pattern=r"^https?://[^\s@/]+(/\S*)?$",
                                      description="Confluent-compatible registry URL (no credentials in it; https://"
                                                  " when confluent_secret_arn is set)")
    confluent_secret_arn: str | None = Field(
        None, pattern=SECRET_ARN, description='its basic-auth secret: JSON {"username": ..., "password": ...}')
    confluent_cidr: str | None = Field(
        None, pattern=r"^\d{1,3}(\.\d{1,3}){3}/\d{1,2}$",
        description="where the registry is, for the function's egress rule when its port is not 443 (443 is open"
                    " for the AWS APIs already); default the VPC CIDR: a registry on another port is expected in or"
                    " next to the VPC, never anywhere on the internet")
    glue_registry_arn: str | None = Field(
        None, pattern=GLUE_REGISTRY_ARN.pattern, description="arn:aws:glue:<region>:<account>:registry/<name>")
    # the function's SCHEMA_SUBJECTS, declared once (consolidator.settings)
    subjects: setting_field("schema_subjects")[0] = setting_field("schema_subjects")[1]

    @model_validator(mode="after")
    def _one_registry(self) -> Self:
        if self.value_format == "json":
            raise ValueError("value_format json needs no schema registry: leave msk.schema_registry out")
        if bool(self.confluent_url) == bool(self.glue_registry_arn):
            raise ValueError("set exactly one of confluent_url and glue_registry_arn")
        if self.glue_registry_arn and self.confluent_secret_arn:
            raise ValueError("confluent_secret_arn is for confluent_url; Glue is read with the IAM role")
        if self.confluent_url and self.decode_in == "event_source_mapping" and not self.confluent_secret_arn:
            raise ValueError("the event source mapping reads a Confluent registry with basic auth:"
                             " confluent_secret_arn is required")
        if self.confluent_secret_arn and not self.confluent_url.lower().startswith("https://"):
            raise ValueError("confluent_url must be https:// with confluent_secret_arn (over http:// the registry's"
                             " credentials would cross the network in cleartext)")
        if self.confluent_cidr and not self.confluent_url:
            raise ValueError("confluent_cidr is for confluent_url")
        if self.subjects and self.decode_in != "function":
            raise ValueError("subjects bind the function's lookups: with decode_in event_source_mapping the mapping"
                             " reads the registry")
        if self.glue_registry_arn and self.decode_in == "function":
            check_glue_format(self.value_format, "glue_registry_arn")
        return self

    @property
    def glue_registry_name(self) -> str | None:
        return GLUE_REGISTRY_ARN.match(self.glue_registry_arn).group(3) if self.glue_registry_arn else None


class MskConfig(_Model):
    """The existing MSK cluster and topic the ingest function consumes (IAM auth)."""

    cluster_arn: str
    topic: str = Field(min_length=1)
    consumer_group_id: str = Field(min_length=1)
    starting_position: Literal["TRIM_HORIZON", "LATEST"] = "TRIM_HORIZON"
    batch_size: int = Field(500, ge=1, le=10_000)
    max_batching_window_seconds: int = Field(1, ge=0, le=300)
    minimum_pollers: int = Field(1, ge=1, le=200)
    maximum_pollers: int = Field(2, ge=1, le=2000)
    retry_attempts: int = Field(10, ge=0, le=10_000, description="bounded: never -1 (infinite)")
    max_record_age_seconds: int = Field(6 * 3600, ge=60, le=604_800, description="bounded: never -1")
    broker_cidr: str | None = Field(None, description="where the brokers are (port 9098) for the Kafka sink; default the VPC CIDR")
    schema_registry: SchemaRegistryConfig | None = Field(
        None, description="values in Avro, Protobuf or JSON Schema with a registry; None: plain JSON values")

    @field_validator("cluster_arn")
    @classmethod
    def _arn(cls, arn: str) -> str:
        if not MSK_CLUSTER_ARN.match(arn):
            raise ValueError("must be arn:aws:kafka:<region>:<account>:cluster/<name>/<uuid>")
        return arn

    @model_validator(mode="after")
    def _pollers(self) -> Self:
        if self.maximum_pollers < self.minimum_pollers:
            raise ValueError("maximum_pollers must be >= minimum_pollers")
        return self

    @property
    def region(self) -> str:
        return MSK_CLUSTER_ARN.match(self.cluster_arn).group(1)

    @property
    def account(self) -> str:
        return MSK_CLUSTER_ARN.match(self.cluster_arn).group(2)

    def topic_arn(self, topic: str) -> str:
        """``arn:...:topic/<cluster name>/<cluster uuid>/<topic>`` for kafka-cluster IAM actions."""
        return self.cluster_arn.replace(":cluster/", ":topic/", 1) + f"/{topic}"

    def group_arn(self, group: str) -> str:
        return self.cluster_arn.replace(":cluster/", ":group/", 1) + f"/{group}"


class KafkaSinkConfig(_Model):
    """Batches go to a topic on the same MSK cluster, IAM auth."""

    kind: Literal["kafka"] = "kafka"
    bootstrap_servers: str = Field(min_length=1, description="comma separated host:9098 list")
    topic: str = Field(min_length=1)


class SqsSinkConfig(_Model):
    kind: Literal["sqs"] = "sqs"
    queue_arn: str = Field(pattern=r"^arn:aws[\w-]*:sqs:[a-z0-9-]+:\d{12}:[\w.-]+$")


class EventBridgeSinkConfig(_Model):
    kind: Literal["events"] = "events"
    event_bus_arn: str = Field(pattern=r"^arn:aws[\w-]*:events:[a-z0-9-]+:\d{12}:event-bus/[\w./-]+$")
    source: str = "consolidator"


SinkConfig = Annotated[KafkaSinkConfig | SqsSinkConfig | EventBridgeSinkConfig, Field(discriminator="kind")]


class DatabaseConfig(_Model):
    """Aurora MySQL 3, Serverless v2."""

    engine_version: str = Field("3.08.0", pattern=r"^3\.\d{2}\.\d+$")
    min_capacity: float = Field(0.5, ge=0, le=256)
    max_capacity: float = Field(4, ge=1, le=256)
    readers: int = Field(0, ge=0, le=15)
    database_name: str = Field("consolidator", pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
    backup_retention_days: int = Field(7, ge=1, le=35)
    deletion_protection: bool = True
    rotation_days: int = Field(30, ge=1, le=365)

    @model_validator(mode="after")
    def _capacity(self) -> Self:
        if self.max_capacity < self.min_capacity:
            raise ValueError("max_capacity must be >= min_capacity")
        return self


class CacheConfig(_Model):
    """ElastiCache (Valkey or Redis OSS) replication group: the flush lock only, tiny."""

    engine: Literal["valkey", "redis"] = "valkey"
    engine_version: str = "8.0"
    node_type: str = Field("cache.t4g.micro", pattern=r"^cache\.[a-z0-9]+\.[a-z0-9]+$")
    replicas: int = Field(0, ge=0, le=5, description=">= 1 enables Multi-AZ automatic failover")


FLUSH_SCHEDULE_SECONDS = 60  # consolidator_infra/schedules.py: the flush function runs once a minute

# The product settings passed to the functions as CONSOLIDATOR_* variables: those the runtime
# declares as deployed (consolidator.settings), with its types, defaults, units and bounds.
POLICY_SETTINGS = deployed_settings()


class _PolicyRules(_Model):
    @model_validator(mode="after")
    def _rules(self) -> Self:
        check_windows(self.debounce_seconds, self.hard_window_seconds)  # the runtime's own rule
        if self.aggregate is not None:  # the runtime's parser; a function has no spec file to read
            if not self.aggregate.lstrip().startswith("["):
                raise ValueError("aggregate must be the spec itself (a JSON list) in a deployment, not a file path")
            parse_outputs(self.aggregate)
        parse_payload(self.member_payload)
        if self.event_time_field is not None:
            try:
                parse_path(self.event_time_field)  # the runtime's rule: a path like "ts" or "meta.at"
            except ValueError as exc:
                raise ValueError(f"event_time_field: {exc}") from None
        if self.tick_interval_seconds > FLUSH_SCHEDULE_SECONDS:
            raise ValueError(f"tick_interval_seconds ({self.tick_interval_seconds:g}) must be at most"
                             f" {FLUSH_SCHEDULE_SECONDS} in a deployment: the flush function is scheduled once a"
                             " minute, so a longer tick would not be honoured")
        return self


PolicyConfig = create_model(
    "PolicyConfig", __base__=_PolicyRules, __module__=__name__,
    __doc__="The product settings of the functions, declared by consolidator.settings and checked by it.",
    **{name: setting_field(name) for name in POLICY_SETTINGS},
)


def deployed_environment(policy: PolicyConfig, model: type) -> dict[str, str]:
    """The ``CONSOLIDATOR_*`` variables of a function whose handler loads ``model``: every
    deployed setting the model declares, as the environment file gives it (unset ones left out)."""
    return {f"{ENV_PREFIX}{name.upper()}": str(value) for name in POLICY_SETTINGS
            if name in model.model_fields and (value := getattr(policy, name)) is not None}


class FunctionsConfig(_Model):
    ingest_memory_mb: int = Field(512, ge=128, le=10_240)
    ingest_timeout_seconds: int = Field(60, ge=5, le=900)
    flush_memory_mb: int = Field(512, ge=128, le=10_240)
    flush_timeout_seconds: int = Field(55, ge=10, le=59, description="< 60 s so one invocation ends before the next tick")
    cleanup_timeout_seconds: int = Field(300, ge=30, le=900)
    log_retention_days: int = 30
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    cleanup_schedule_hour_utc: int = Field(3, ge=0, le=23)
    tracing_layer_arn: str | None = Field(
        None, pattern=r"^arn:aws[\w-]*:lambda:[a-z0-9-]+:\d{12}:layer:[\w-]+:\d+$",
        description="the ADOT collector Lambda layer (arm64) of the region: the functions export their spans"
                    " over OTLP to it, and it to X-Ray; None: tracing off")


class AlarmConfig(_Model):
    """Where alarms go and when they fire."""

    email: str | None = Field(None, pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
    sns_topic_arn: str | None = Field(None, pattern=r"^arn:aws[\w-]*:sns:[a-z0-9-]+:\d{12}:[\w-]+$")
    offset_lag_records: int = Field(10_000, ge=1, description="ingest OffsetLag (records) sustained 5 min")
    skipped_ticks_minutes: int = Field(5, ge=2, le=60, description="flush ticks skipped in N consecutive minutes")
    function_errors: int = Field(0, ge=0, description="errors per 5 min above this fire")
    function_throttles: int = Field(0, ge=0, description="throttles per 5 min above this fire")
    flush_throttles: int = Field(3, ge=0, description="flush throttles per 15 min above this fire")
    database_cpu_percent: float = Field(80, gt=0, le=100)
    database_connections: int = Field(200, ge=1)

    # on-call alarms
    runbook_base_url: str = Field(
        pattern=r"^https?://[^\s#]+$",
        description="where docs/runbook.md is published; each alarm links to <url>#<alarmname>",
    )
    records_failed_minutes: int = Field(3, ge=1, le=60, description="ingest RecordsFailed > 0 in N consecutive minutes")
    dead_letter_age_warning_hours: float = Field(24, gt=0, description="oldest dead-letter message older than this")
    dead_letter_age_critical_days: float = Field(
        10, gt=0, lt=14, description="oldest dead-letter message older than this (the queue keeps 14 days)")
    duration_warning_percent: float = Field(
        80, gt=0, lt=100, description="ingest/cleanup duration above this share of their timeout")
    cache_cpu_percent: float = Field(90, gt=0, le=100, description="cache engine CPU")
    cache_memory_percent: float = Field(90, gt=0, le=100, description="cache memory used")
    database_capacity_percent: float = Field(
        95, gt=0, le=100, description="Aurora ACUUtilization: capacity used, in percent of max_capacity")


class CompletionConfig(_Model):
    """Batch completion tracking: the flush seals batches, downstream sends acks to an
    SQS queue, the acks function applies them and publishes completions to ``sink``."""

    sink: SinkConfig = Field(description="where completion messages go (any sink kind)")
    deadline_seconds: int = Field(3600, ge=60, description="a sent batch not complete after this is overdue")
    lease_seconds: int = Field(60, ge=10, le=3600, description="re-publish a completion not confirmed after this")
    max_age_days: int = Field(7, ge=1, le=365, description="trackers never completed after this are removed")
    batch_size: int = Field(1000, ge=1, le=10_000, description="acks per invocation (SQS event source); a"
                            " larger poll updates each tracker once for more of its members")
    max_batching_window_seconds: int = Field(1, ge=0, le=300)
    max_receive_count: int = Field(5, ge=1, le=1000, description="deliveries of a refused ack before its DLQ")
    timeout_seconds: int = Field(30, ge=5, le=900)
    memory_mb: int = Field(256, ge=128, le=10_240)
    senders: list[Annotated[str, Field(pattern=ACK_SENDER)]] = Field(
        min_length=1, description="who may send acks: 12-digit account ids or IAM role/user ARNs; the"
                                  " acks queue's policy refuses sqs:SendMessage to every other principal")
    max_concurrency: int = Field(
        5, ge=2, le=1000, description="acks function instances the SQS event source runs at most (each holds"
                                      " one database connection): an ack flood cannot take ingest's and flush's")
    reserved_concurrency: int = Field(
        6, ge=1, le=1000, description="reserved for the acks function (its ceiling and its floor); >= max_concurrency"
                                      " plus one for the sweep")
    sweep_minutes: int = Field(5, ge=1, le=60, description="how often pending completions and overdue batches are checked")

    @model_validator(mode="after")
    def _batching(self) -> Self:
        if self.batch_size > 10 and self.max_batching_window_seconds < 1:
            raise ValueError("batch_size above 10 needs max_batching_window_seconds >= 1 (SQS event source rule)")
        if self.reserved_concurrency < self.max_concurrency:
            raise ValueError("reserved_concurrency must be >= max_concurrency (else the event source is throttled)")
        return self

    def sender_principal_arns(self) -> list[str]:
        """``senders`` as principal ARN patterns (an account id: every principal of that account)."""
        return [f"arn:aws:iam::{s}:*" if s.isdigit() else s for s in self.senders]


class EnvironmentConfig(_Model):
    """Everything one deployment (dev, staging, prod, ...) needs."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{1,20}$")
    account: str | None = Field(None, pattern=ACCOUNT, description="None: environment-agnostic synth")
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    removal_policy: Literal["retain", "destroy"] = "retain"
    network: NetworkConfig = NetworkConfig()
    msk: MskConfig
    sink: SinkConfig
    database: DatabaseConfig = DatabaseConfig()
    cache: CacheConfig = CacheConfig()
    policy: PolicyConfig = PolicyConfig()
    functions: FunctionsConfig = FunctionsConfig()
    alarms: AlarmConfig
    spark: bool = Field(False, description="also deploy the EMR Serverless Spark application")
    completion: CompletionConfig | None = Field(None, description="batch completion tracking; None: off")
    tags: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.msk.region != self.region:
            raise ValueError(f"msk.cluster_arn is in {self.msk.region}, the environment in {self.region}")
        if self.account and self.msk.account != self.account:
            raise ValueError("msk.cluster_arn belongs to another account")
        if self.account and not self.network.availability_zones:
            raise ValueError("network.availability_zones is required when account is set (no lookups)")
        for zone in self.network.availability_zones:
            if not zone.startswith(self.region):
                raise ValueError(f"availability zone {zone} is not in {self.region}")
        return self

    @property
    def stage_id(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("-"))

    def sink_url(self) -> str:
        """The CONSOLIDATOR_SINK_URL for the flush function."""
        return sink_url_of(self.sink, self.region)


def sink_url_of(sink: KafkaSinkConfig | SqsSinkConfig | EventBridgeSinkConfig, region: str) -> str:
    """The sink URL (``consolidator.sinks.sink_from_url``) of a configured destination."""
    if isinstance(sink, KafkaSinkConfig):
        return f"kafka://{sink.bootstrap_servers}/{sink.topic}?auth=iam&region={region}"
    if isinstance(sink, SqsSinkConfig):
        _, _, _, queue_region, account, name = sink.queue_arn.split(":", 5)
        return f"sqs://sqs.{queue_region}.amazonaws.com/{account}/{name}"
    bus = sink.event_bus_arn.split(":event-bus/", 1)[1]
    return f"events://{bus}?source={quote(sink.source)}"


def load_environment(name: str, directory: Path = ENVIRONMENTS_DIR) -> EnvironmentConfig:
    path = directory / f"{name}.json"
    if not path.is_file():
        raise ConfigError(f"no environment file {path.name} in {directory.name}/")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path.name}: not valid JSON: {error}") from None
    try:
        config = EnvironmentConfig.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg'].removeprefix('Value error, ')}"
            for e in error.errors()
        )
        raise ConfigError(f"{path.name}: {problems}") from None
    if config.name != name:
        raise ConfigError(f"{path.name}: name is {config.name!r}, expected {name!r}")
    return config


def environment_names(directory: Path = ENVIRONMENTS_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.json"))
