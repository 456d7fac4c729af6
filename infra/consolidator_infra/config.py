"""Per-environment settings of the CDK app: a typed, validated model read from JSON.

One file per environment under ``infra/environments/<name>.json``. Everything the stack
needs is here; constructs receive the parts they use as typed arguments, never context
lookups. Loading fails with one error naming every bad field. The sections with rules of their
own live beside this module: the source (``config_source.py``: MSK, schema registry), the sinks
(``config_sink.py``), the product settings (``config_policy.py``), and the base model and error
(``config_model.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import Field, ValidationError, model_validator

from consolidator_infra.config_model import ConfigError, ConfigModel
from consolidator_infra.config_policy import PolicyConfig
from consolidator_infra.config_sink import SinkConfig, sink_url_of
from consolidator_infra.config_source import MskConfig

ENVIRONMENTS_DIR = Path(__file__).resolve().parent.parent / "environments"

ACCOUNT = r"^\d{12}$"
ACK_SENDER = r"^(\d{12}|arn:aws[\w-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+)$"


class NetworkConfig(ConfigModel):
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


class DatabaseConfig(ConfigModel):
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


class CacheConfig(ConfigModel):
    """ElastiCache (Valkey or Redis OSS) replication group: the flush lock only, tiny."""

    engine: Literal["valkey", "redis"] = "valkey"
    engine_version: str = "8.0"
    node_type: str = Field("cache.t4g.micro", pattern=r"^cache\.[a-z0-9]+\.[a-z0-9]+$")
    replicas: int = Field(0, ge=0, le=5, description=">= 1 enables Multi-AZ automatic failover")


class FunctionsConfig(ConfigModel):
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


class AlarmConfig(ConfigModel):
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


class CompletionConfig(ConfigModel):
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


class EnvironmentConfig(ConfigModel):
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
