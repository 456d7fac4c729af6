"""The source section of an environment file: the MSK cluster and topic the ingest function
consumes, and the schema registry its values may be encoded with."""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from consolidator.settings import check_glue_format, setting_field
from consolidator_infra.config_model import ConfigModel

MSK_CLUSTER_ARN = re.compile(r"^arn:aws[\w-]*:kafka:([a-z0-9-]+):(\d{12}):cluster/([\w-]+)/([\w-]+)$")
SECRET_ARN = r"^arn:aws[\w-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[\w/+=.@-]+$"
GLUE_REGISTRY_ARN = re.compile(r"^arn:aws[\w-]*:glue:([a-z0-9-]+):(\d{12}):registry/([A-Za-z0-9_$#.-]+)$")


class SchemaRegistryConfig(ConfigModel):
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


class MskConfig(ConfigModel):
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
