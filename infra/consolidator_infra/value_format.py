"""The topic's value format (msk.schema_registry): who decodes Avro, Protobuf or JSON Schema.

- ``decode_in: function``: the ingest function gets ``CONSOLIDATOR_VALUE_FORMAT`` and its
  registry (``SCHEMA_REGISTRY_URL`` with read access to the credentials' secret, or
  ``GLUE_REGISTRY_NAME`` with ``glue:GetSchemaVersion`` on that registry's schemas); poison is
  dead-lettered by the function with its reason and schema id (docs/semantics.md section 2).
- ``decode_in: event_source_mapping``: the mapping (provisioned mode) validates and decodes each
  value with the registry and hands the function JSON (``EventRecordFormat: JSON``), so the
  function's format stays ``json``. A record the mapping cannot validate is not passed to the
  function: after its retries the mapping sends the batch's metadata to its on-failure queue (the
  records stay in Kafka, replayable from those offsets), never dropping it silently.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from consolidator_infra.config_source import SchemaRegistryConfig

P = "CONSOLIDATOR_"


class ValueFormat(Construct):
    """The value format's pieces for the ingest function and its event source mapping."""

    def __init__(self, scope: Construct, id: str, *, config: SchemaRegistryConfig | None) -> None:
        super().__init__(scope, id)
        self.config = config
        self.secret = (secretsmanager.Secret.from_secret_complete_arn(self, "RegistrySecret", config.confluent_secret_arn)
                       if config is not None and config.confluent_secret_arn else None)

    @property
    def in_function(self) -> bool:
        return self.config is not None and self.config.decode_in == "function"

    def function_environment(self) -> dict[str, str]:
        """The ingest function's format settings (none when it reads plain JSON)."""
        config = self.config
        if not self.in_function:
            return {}
        environment = {f"{P}VALUE_FORMAT": config.value_format}
        if config.glue_registry_arn:
            environment[f"{P}GLUE_REGISTRY_NAME"] = config.glue_registry_name
        else:
            environment[f"{P}SCHEMA_REGISTRY_URL"] = config.confluent_url
            if self.secret is not None:
                environment[f"{P}SCHEMA_REGISTRY_SECRET_ARN"] = self.secret.secret_arn
        if config.subjects:
            environment[f"{P}SCHEMA_SUBJECTS"] = json.dumps(config.subjects)
        return environment

    def grant(self, function: lambda_.Function, group: ec2.SecurityGroup, vpc_cidr: str) -> None:
        """What the function reads when it decodes: the registry's secret, or Glue's schema
        versions; and the registry's port when it is not HTTPS's 443 (which every function may
        reach: consolidator_infra.network), towards ``confluent_cidr`` (default ``vpc_cidr``)
        only: never a port open to the whole internet."""
        if not self.in_function:
            return
        if self.config.confluent_url:
            parts = urlsplit(self.config.confluent_url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            if port != 443:
                group.add_egress_rule(ec2.Peer.ipv4(self.config.confluent_cidr or vpc_cidr), ec2.Port.tcp(port),
                                      "Schema registry")
        if self.secret is not None:
            self.secret.grant_read(function)
        if self.config.glue_registry_arn:
            arn = self.config.glue_registry_arn
            schemas = arn.replace(":registry/", ":schema/", 1) + "/*"
            function.add_to_role_policy(iam.PolicyStatement(
                sid="ReadSchemaVersions", actions=["glue:GetSchemaVersion"], resources=[arn, schemas]))

    def mapping_registry(self) -> lambda_.ISchemaRegistry | None:
        """The event source mapping's schema registry configuration (None: the mapping passes the
        values as they are)."""
        config = self.config
        if config is None or self.in_function:
            return None
        validate = [lambda_.KafkaSchemaValidationConfig(attribute=lambda_.KafkaSchemaValidationAttribute.VALUE)]
        if config.glue_registry_arn:
            return sources.GlueSchemaRegistry(
                schema_registry_arn=config.glue_registry_arn, event_record_format=lambda_.EventRecordFormat.JSON,
                schema_validation_configs=validate)
        return sources.ConfluentSchemaRegistry(
            schema_registry_uri=config.confluent_url, event_record_format=lambda_.EventRecordFormat.JSON,
            authentication_type=lambda_.KafkaSchemaRegistryAccessConfigType.BASIC_AUTH, secret=self.secret,
            schema_validation_configs=validate)
