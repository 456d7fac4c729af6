"""The Consolidator stack: composes one construct per capability and wires grants where they meet."""

from __future__ import annotations

import importlib.util

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from consolidator_infra.cache import Cache
from consolidator_infra.completion import CompletionTracking
from consolidator_infra.config import EnvironmentConfig
from consolidator_infra.config_sink import (
    EventBridgeSinkConfig,
    KafkaSinkConfig,
    SinkConfig,
    SqsSinkConfig,
    sink_url_of,
)
from consolidator_infra.database import Database
from consolidator_infra.dead_letter import DeadLetterQueues
from consolidator_infra.functions import FunctionFactory
from consolidator_infra.ingest_source import IngestEventSource
from consolidator_infra.migration import MigrationTrigger
from consolidator_infra.monitoring import Monitored, Monitoring
from consolidator_infra.nag import suppress_findings
from consolidator_infra.network import Network
from consolidator_infra.schedules import Schedules
from consolidator_infra.value_format import ValueFormat

P = "CONSOLIDATOR_"


class ConsolidatorStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: EnvironmentConfig, **kwargs) -> None:
        super().__init__(scope, id, description=f"Consolidator ({config.name}): debounced aggregator", **kwargs)
        self.config = config
        removal = RemovalPolicy.RETAIN if config.removal_policy == "retain" else RemovalPolicy.DESTROY
        fn = config.functions
        policy = config.policy

        self.network = Network(self, "Network", config=config.network, removal_policy=removal)
        self.database = Database(
            self, "Database", config=config.database, network=self.network, removal_policy=removal,
            log_retention_days=fn.log_retention_days,
        )
        self.cache = Cache(self, "Cache", config=config.cache, network=self.network, removal_policy=removal)
        self.dead_letters = DeadLetterQueues(self, "DeadLetters", removal_policy=removal)

        self.functions = FunctionFactory(
            self, "Functions", network=self.network, log_retention_days=fn.log_retention_days,
            log_level=fn.log_level, removal_policy=removal, tracing_layer_arn=fn.tracing_layer_arn,
            policy=policy,  # the deployed settings
            environment={f"{P}ENVIRONMENT": config.name},  # the metrics' environment dimension
        )
        dead_letter = {f"{P}DEAD_LETTER_URL": self.dead_letters.url}
        net = self.network
        kafka_cidr = (config.msk.broker_cidr or config.network.vpc_cidr) if isinstance(config.sink, KafkaSinkConfig) else None

        self.value_format = ValueFormat(self, "ValueFormat", config=config.msk.schema_registry)
        ingest_group = net.function_group("Ingest", database=True, cache=False, kafka_cidr=None)
        self.ingest = self.functions.build(
            "ingest", description="MSK records -> MySQL buffer (partial batch failures)",
            timeout=Duration.seconds(fn.ingest_timeout_seconds), memory_mb=fn.ingest_memory_mb,
            security_group=ingest_group,
            environment={**dead_letter, **self._database_user("ingest"), **self.value_format.function_environment(),
                         # the ingest spans' messaging.consumer.group.name: an MSK event does not carry it
                         f"{P}CONSUMER_GROUP": config.msk.consumer_group_id},
        )
        self.value_format.grant(self.ingest, ingest_group, config.network.vpc_cidr)
        self.flush = self.functions.build(
            "flush", description="Claims due groups, publishes one batch per group, marks them sent",
            timeout=Duration.seconds(fn.flush_timeout_seconds), memory_mb=fn.flush_memory_mb,
            security_group=net.function_group("Flush", database=True, cache=True, kafka_cidr=kafka_cidr),
            reserved_concurrency=1,
            environment={
                **dead_letter, **self._database_user("flush"),
                f"{P}REDIS_URL": self.cache.url,
                f"{P}REDIS_AUTH_SECRET_ARN": self.cache.auth_secret.secret_arn,
                f"{P}SINK_URL": config.sink_url(),
                f"{P}LOCK_TTL_SECONDS": str(fn.flush_timeout_seconds),
                **({f"{P}COMPLETION_TRACKING": "true"} if config.completion else {}),
            },
        )
        self.cleanup = self.functions.build(
            "cleanup", description="Monthly partitions: create ahead, drop old fully sent ones",
            timeout=Duration.seconds(fn.cleanup_timeout_seconds), memory_mb=256,
            security_group=net.function_group("Cleanup", database=True, cache=False, kafka_cidr=None),
            environment={**self._database_user("cleanup"),
                         **({f"{P}COMPLETION_MAX_AGE_SECONDS": str(config.completion.max_age_days * 86_400)}
                                          if config.completion else {})},
        )
        self.migrate = self.functions.build(
            "migrate", description="Applies schema migrations on deploy (CDK trigger)",
            timeout=Duration.minutes(5), memory_mb=256,
            security_group=net.function_group("Migrate", database=True, cache=False, kafka_cidr=None),
            environment={f"{P}DATABASE_SECRET_ARN": self.database.secret.secret_arn},
        )

        # Grants where the pieces meet: each function gets exactly what it uses. Network access
        # to the database: Network.function_group. Only the migration reads the master secret;
        # each other function reads its own user's secret (its database grants: store/users.py).
        self.database.secret.grant_read(self.migrate)
        for role, function in (("ingest", self.ingest), ("flush", self.flush), ("cleanup", self.cleanup)):
            self.database.users[role].grant_read(function)
        for function in (self.ingest, self.flush):
            self.dead_letters.queue.grant_send_messages(function)
        self.cache.auth_secret.grant_read(self.flush)
        self._grant_sink(self.flush)

        self.ingest_source = IngestEventSource(
            self, "IngestSource", config=config.msk, function=self.ingest,
            on_failure=self.dead_letters.ingest_failures, schema_registry=self.value_format.mapping_registry(),
        )
        self.schedules = Schedules(
            self, "Schedules", flush=self.flush, cleanup=self.cleanup, cleanup_hour_utc=fn.cleanup_schedule_hour_utc,
        )
        # After the cluster and its instances, and after the whole network: the security-group
        # rules that let the migrate function reach MySQL and Secrets Manager live there.
        self.migration = MigrationTrigger(
            self, "Migration", function=self.migrate, after=[self.database.cluster, self.network],
        )
        self.monitoring = Monitoring(
            self, "Monitoring", config=config.alarms, policy=policy, functions=fn, database=config.database,
            environment=config.name,
            targets=Monitored(
                ingest=self.ingest, flush=self.flush, cleanup=self.cleanup,
                dead_letter=self.dead_letters.queue, ingest_failures=self.dead_letters.ingest_failures,
                cluster=self.database.cluster, cache=self.cache.group,
            ),
        )
        self.completion = self._completion() if config.completion else None
        self._users_after_migration()
        self.spark = self._spark() if config.spark else None
        self.monitoring.add_dashboard()  # after every construct that adds alarms
        suppress_findings(self)

    def _completion(self) -> CompletionTracking:
        """Completion tracking: the acks function (same factory as the others) and its wiring."""
        completion = self.config.completion
        sink_cidr = (self.config.msk.broker_cidr or self.config.network.vpc_cidr) \
            if isinstance(completion.sink, KafkaSinkConfig) else None
        self.acks = self.functions.build(
            "acks", description="Member acks from SQS -> completion trackers; completion messages",
            timeout=Duration.seconds(completion.timeout_seconds), memory_mb=completion.memory_mb,
            reserved_concurrency=completion.reserved_concurrency,
            security_group=self.network.function_group("Acks", database=True, cache=False, kafka_cidr=sink_cidr),
            environment={
                **self._database_user("acks"),
                f"{P}COMPLETION_SINK_URL": sink_url_of(completion.sink, self.config.region),
                f"{P}COMPLETION_DEADLINE_SECONDS": str(completion.deadline_seconds),
                f"{P}COMPLETION_LEASE_SECONDS": str(completion.lease_seconds),
            },
        )
        self.database.users["acks"].grant_read(self.acks)
        self._grant_sink(self.acks, completion.sink, sid="PublishCompletions")
        return CompletionTracking(
            self, "Completion", config=completion, function=self.acks, monitoring=self.monitoring,
            removal_policy=RemovalPolicy.RETAIN if self.config.removal_policy == "retain" else RemovalPolicy.DESTROY,
        )

    def _database_user(self, role: str) -> dict[str, str]:
        """The function's own database user: its secret, and the migration's list of users."""
        return {f"{P}DATABASE_SECRET_ARN": self.database.add_user(role).secret_arn}

    def _users_after_migration(self) -> None:
        """The migrate function learns every user's secret; the users exist before the first
        rotation of their secrets, and before the functions that connect as them are updated."""
        self.migrate.add_environment(f"{P}DATABASE_USERS", self.to_json_string(
            {role: secret.secret_arn for role, secret in self.database.users.items()}))
        for secret in self.database.users.values():
            secret.grant_read(self.migrate)
        for dependent in (*self.database.user_rotations, self.ingest, self.flush, self.cleanup,
                          *([self.acks] if self.completion else [])):
            dependent.node.add_dependency(self.migration.trigger)

    def _grant_sink(self, function: lambda_.Function, sink: SinkConfig | None = None,
                    sid: str = "PublishBatches") -> None:
        sink = sink or self.config.sink
        if isinstance(sink, KafkaSinkConfig):
            msk = self.config.msk
            function.add_to_role_policy(iam.PolicyStatement(
                sid=sid,
                actions=["kafka-cluster:Connect", "kafka-cluster:WriteDataIdempotently",
                         "kafka-cluster:DescribeTopic", "kafka-cluster:WriteData"],
                resources=[msk.cluster_arn, msk.topic_arn(sink.topic)],
            ))
        elif isinstance(sink, SqsSinkConfig):
            function.add_to_role_policy(iam.PolicyStatement(
                sid=sid, actions=["sqs:SendMessage"], resources=[sink.queue_arn],
            ))
        elif isinstance(sink, EventBridgeSinkConfig):
            function.add_to_role_policy(iam.PolicyStatement(
                sid=sid, actions=["events:PutEvents"], resources=[sink.event_bus_arn],
            ))

    def _spark(self):
        """The optional EMR Serverless application, ``consolidator_infra/emr_serverless.py``
        . Contract: ``attach(stack: ConsolidatorStack) -> Construct``;
        it may use ``stack.config``, ``stack.network``, ``stack.database`` and ``stack.monitoring``."""
        if importlib.util.find_spec("consolidator_infra.emr_serverless") is None:
            raise RuntimeError("spark is enabled but consolidator_infra/emr_serverless.py does not exist")
        from consolidator_infra import emr_serverless

        return emr_serverless.attach(self)

