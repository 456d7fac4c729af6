"""Ingest event source: the MSK topic -> ingest function, provisioned mode, offset-safe.

* ``ReportBatchItemFailures``: the handler returns the records not yet durable; Lambda
  re-delivers from the first failure, so offsets only advance past durable records.
* Bounded retries and maximum record age (never infinite), then the batch's metadata goes to
  the on-failure queue (the records stay in Kafka for replay from those offsets).
* Provisioned pollers (minimum/maximum) for steady throughput; Kafka metrics (OffsetLag) on.
* Optionally the mapping's schema registry configuration (consolidator_infra.value_format):
  it decodes Avro, Protobuf or JSON Schema values and hands the function JSON.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from consolidator_infra.config_source import MskConfig


class IngestEventSource(Construct):
    def __init__(
        self, scope: Construct, id: str, *, config: MskConfig, function: lambda_.Function, on_failure: sqs.IQueue,
        schema_registry: lambda_.ISchemaRegistry | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.source = sources.ManagedKafkaEventSource(
            cluster_arn=config.cluster_arn,
            topic=config.topic,
            consumer_group_id=config.consumer_group_id,
            starting_position=lambda_.StartingPosition[config.starting_position],
            batch_size=config.batch_size,
            max_batching_window=Duration.seconds(config.max_batching_window_seconds),
            provisioned_poller_config=sources.ProvisionedPollerConfig(
                minimum_pollers=config.minimum_pollers, maximum_pollers=config.maximum_pollers,
            ),
            report_batch_item_failures=True,
            retry_attempts=config.retry_attempts,
            max_record_age=Duration.seconds(config.max_record_age_seconds),
            on_failure=sources.SqsDlq(on_failure),
            schema_registry_config=schema_registry,
            metrics_config=lambda_.MetricsConfig(
                metrics=[lambda_.MetricType.EVENT_COUNT, lambda_.MetricType.ERROR_COUNT, lambda_.MetricType.KAFKA_METRICS],
            ),
        )
        function.add_event_source(self.source)
        # IAM access control on the cluster: read the topic as the consumer group, nothing else.
        function.add_to_role_policy(iam.PolicyStatement(
            sid="ConsumeTopic",
            actions=[
                "kafka-cluster:Connect", "kafka-cluster:DescribeGroup", "kafka-cluster:AlterGroup",
                "kafka-cluster:DescribeTopic", "kafka-cluster:ReadData",
                "kafka-cluster:DescribeClusterDynamicConfiguration",
            ],
            resources=[config.cluster_arn, config.topic_arn(config.topic), config.group_arn(config.consumer_group_id)],
        ))
