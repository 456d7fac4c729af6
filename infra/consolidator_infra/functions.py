"""One factory for every function: same runtime, architecture, packaging, tracing, logging.

Tracing (per environment, ``functions.tracing_layer_arn``): the functions trace with the
OpenTelemetry SDK (``consolidator.support.tracing``) and export OTLP over HTTP to
``localhost:4318``, where the ADOT collector layer (a Lambda extension) receives the spans and
exports them to X-Ray, signing with the function's role. Not the SDK straight to X-Ray's OTLP
endpoint: that endpoint takes SigV4-signed requests only, which the standard OTLP exporter does
not make, and the collector also batches and sends outside the invocation's time. Without a
layer no ``OTEL_*`` variable is set and the functions make no span at all.

Code is bundled locally without Docker (``infra/bundle.py``: arm64 manylinux wheels of the
runtime dependencies + the ``consolidator`` package + ``functions/<name>/handler.py``; no
Spark, no CDK). Each function gets its own role and security group, so grants stay per
function.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from aws_cdk import AssetHashType, Duration, RemovalPolicy, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from consolidator.rules.errors import ConfigurationError
from consolidator.settings import (
    AckSettings,
    CleanupSettings,
    FlushSettings,
    IngestSettings,
    MigrateSettings,
    load_settings,
)
from consolidator_infra.config_model import ConfigError
from consolidator_infra.config_policy import PolicyConfig, deployed_environment
from consolidator_infra.network import Network, retention_days

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import bundle

RUNTIME = lambda_.Runtime.PYTHON_3_12  # must match bundle.PYTHON_VERSION (cp312 wheels)
ARCHITECTURE = lambda_.Architecture.ARM_64  # must match bundle.PLATFORMS (aarch64 wheels)
HANDLER = "handler.handler"

# The settings model each function's handler loads (functions/<name>/handler.py).
RUNTIME_SETTINGS = {"ingest": IngestSettings, "flush": FlushSettings, "cleanup": CleanupSettings,
                    "migrate": MigrateSettings, "acks": AckSettings}
# Stand-ins for values known only at deploy time (tokens), of the form the setting takes.
_SECRET = "arn:aws:secretsmanager:eu-west-1:111111111111:secret:synth-placeholder"
_QUEUE = "sqs://sqs.eu-west-1.amazonaws.com/111111111111/synth-placeholder"
DEPLOY_TIME_PLACEHOLDERS = {
    "CONSOLIDATOR_DATABASE_SECRET_ARN": _SECRET, "CONSOLIDATOR_REDIS_AUTH_SECRET_ARN": _SECRET,
    "CONSOLIDATOR_REDIS_URL": "rediss://synth-placeholder:6379/0", "CONSOLIDATOR_DEAD_LETTER_URL": _QUEUE,
    "CONSOLIDATOR_SINK_URL": _QUEUE, "CONSOLIDATOR_COMPLETION_SINK_URL": _QUEUE,
    "CONSOLIDATOR_DATABASE_USERS": json.dumps(dict.fromkeys(("ingest", "flush", "acks", "cleanup"), _SECRET)),
}


def check_function_environment(name: str, environment: dict[str, object]) -> None:
    """Load the function's runtime settings from the variables it will get, at synth time, so an
    environment file the runtime would refuse (bounds, cross-setting rules, unknown names) fails
    ``cdk synth`` instead of the first invocation. Deploy-time values are replaced by placeholders."""
    environ = {key: DEPLOY_TIME_PLACEHOLDERS.get(key, "") if Token.is_unresolved(value) else str(value)
               for key, value in environment.items()}
    try:
        load_settings(RUNTIME_SETTINGS[name], environ=environ)
    except ConfigurationError as exc:
        raise ConfigError(f"function {name}: {exc}") from None


def function_code(name: str) -> lambda_.Code:
    """The locally built bundle of ``functions/<name>``; its content hash is the asset hash."""
    directory = bundle.function_bundle(name)
    return lambda_.Code.from_asset(
        str(directory), asset_hash_type=AssetHashType.CUSTOM, asset_hash=directory.name,
        exclude=[".complete"],
    )


class FunctionFactory(Construct):
    def __init__(
        self, scope: Construct, id: str, *, network: Network, environment: dict[str, str], policy: PolicyConfig,
        log_retention_days: int, log_level: str, removal_policy: RemovalPolicy,
        tracing_layer_arn: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        self._tracing_layer_arn = tracing_layer_arn
        self._network = network
        self._environment = environment
        self._policy = policy
        self._retention = retention_days(log_retention_days)
        self._log_level = log_level
        self._removal_policy = removal_policy

    def build(
        self, name: str, *, description: str, timeout: Duration, memory_mb: int,
        security_group: ec2.ISecurityGroup, environment: dict[str, str],
        reserved_concurrency: int | None = None,
    ) -> lambda_.Function:
        """The function ``name``; besides ``environment`` it gets every deployed setting of the
        environment file that its handler's settings model declares (``deployed_environment``)."""
        environment = {**deployed_environment(self._policy, RUNTIME_SETTINGS[name]), **environment}
        check_function_environment(name, {**self._environment, **environment})
        log_group = logs.LogGroup(
            self, f"{name.capitalize()}Logs", retention=self._retention, removal_policy=self._removal_policy,
        )
        layers, tracing = [], {}
        if self._tracing_layer_arn is not None:
            layers = [lambda_.LayerVersion.from_layer_version_arn(self, f"{name.capitalize()}Collector",
                                                                  self._tracing_layer_arn)]
            tracing = otel_environment(name)
        return lambda_.Function(
            self, name.capitalize(),
            layers=layers,
            description=description,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=HANDLER,
            code=function_code(name),
            timeout=timeout,
            memory_size=memory_mb,
            reserved_concurrent_executions=reserved_concurrency,
            tracing=lambda_.Tracing.ACTIVE,
            log_group=log_group,
            vpc=self._network.vpc,
            vpc_subnets=self._network.function_subnets,
            security_groups=[security_group],
            environment={
                "POWERTOOLS_SERVICE_NAME": f"consolidator-{name}",
                "POWERTOOLS_METRICS_NAMESPACE": "Consolidator",
                "POWERTOOLS_LOG_LEVEL": self._log_level,
                # the one source of every sink's timeout (consolidator.settings.sink_timeout_seconds)
                "CONSOLIDATOR_FUNCTION_TIMEOUT_SECONDS": str(int(timeout.to_seconds())),
                **tracing,
                **self._environment,
                **environment,
            },
        )


def otel_environment(name: str) -> dict[str, str]:
    """The standard ``OTEL_*`` variables of function ``name`` exporting to the collector layer."""
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318",  # the collector extension
        "OTEL_SERVICE_NAME": f"consolidator-{name}",
    }
