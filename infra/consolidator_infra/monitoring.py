"""Monitoring: the alarms of the runbook (README.md, Alarms) and one dashboard.

Product metrics come from Powertools EMF in namespace ``Consolidator`` with dimension
``service`` = ingest | flush | cleanup. Every alarm notifies the alarm topic (created,
KMS-encrypted, with an optional e-mail subscription, or an existing topic).
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_rds as rds
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from consolidator_infra.config import AlarmConfig, PolicyConfig

NAMESPACE = "Consolidator"
RUNBOOK = "README.md#alarms"


@dataclass(frozen=True)
class Monitored:
    ingest: lambda_.Function
    flush: lambda_.Function
    cleanup: lambda_.Function
    dead_letter: sqs.IQueue
    ingest_failures: sqs.IQueue
    cluster: rds.DatabaseCluster


def product_metric(name: str, service: str, statistic: str = "Sum", period: Duration | None = None) -> cw.Metric:
    return cw.Metric(
        namespace=NAMESPACE, metric_name=name, dimensions_map={"service": service},
        statistic=statistic, period=period or Duration.minutes(1),
    )


class Monitoring(Construct):
    def __init__(
        self, scope: Construct, id: str, *, config: AlarmConfig, policy: PolicyConfig, targets: Monitored,
        environment: str,
    ) -> None:
        super().__init__(scope, id)
        self.topic = self._topic(config)
        self.alarms: dict[str, cw.Alarm] = {}
        t = targets
        five = Duration.minutes(5)

        oldest_limit_ms = (policy.hard_window_seconds + 2 * policy.tick_interval_seconds) * 1000
        self._alarm(
            "OldestPendingAge", product_metric("OldestPendingAge", "flush", "Maximum"),
            threshold=oldest_limit_ms, periods=2,
            what=f"The oldest PENDING event is older than hard window + 2 ticks ({oldest_limit_ms:.0f} ms): "
                 "the flush is not keeping up or not publishing.",
        )
        self._alarm(
            "DeadBatches", product_metric("DeadBatches", "flush", period=five), threshold=0,
            what="A batch failed max_attempts publishes and went to the dead-letter queue.",
        )
        self._alarm(
            "EventsExpired", product_metric("EventsExpired", "flush", period=five), threshold=0,
            what="Buffered events outlived the event TTL and went to the dead-letter queue as 'expired' "
                 "(a throttled group's backlog, or a flush that is not keeping up).",
        )
        for name, queue in (("DeadLetterQueueNotEmpty", t.dead_letter), ("IngestFailuresNotEmpty", t.ingest_failures)):
            self._alarm(
                name, queue.metric_approximate_number_of_messages_visible(period=five, statistic="Maximum"),
                threshold=0, what=f"{name}: entries wait for an operator (poison events, dead batches or given-up offsets).",
            )
        for label, function in (("Ingest", t.ingest), ("Flush", t.flush), ("Cleanup", t.cleanup)):
            self._alarm(
                f"{label}Errors", function.metric_errors(period=five, statistic="Sum"),
                threshold=config.function_errors, what=f"The {label.lower()} function raised errors.",
            )
            if label == "Flush":  # one scheduled tick at a time: a few throttles are expected
                metric = function.metric_throttles(period=Duration.minutes(15), statistic="Sum")
                threshold = config.flush_throttles
            else:
                metric, threshold = function.metric_throttles(period=five, statistic="Sum"), config.function_throttles
            self._alarm(f"{label}Throttles", metric, threshold=threshold, what=f"The {label.lower()} function is throttled.")
        self._alarm(
            "IngestOffsetLag",
            t.ingest.metric("OffsetLag", statistic="Maximum", period=Duration.minutes(1)),
            threshold=config.offset_lag_records, periods=5,
            what="Ingest falls behind the topic (records not yet processed) for 5 minutes.",
        )
        self._alarm(
            "FlushTicksSkipped", product_metric("TicksSkipped", "flush"),
            threshold=0, periods=config.skipped_ticks_minutes,
            what=f"Flush ticks skipped (lock held or Redis down) in each of {config.skipped_ticks_minutes} minutes.",
        )
        self._alarm(
            "FlushNotRunning", t.flush.metric_invocations(period=five, statistic="Sum"),
            threshold=1, comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            missing=cw.TreatMissingData.BREACHING,
            what="The flush function was not invoked for 5 minutes (schedule disabled or broken).",
        )
        self._alarm(
            "DatabaseCpu", t.cluster.metric_cpu_utilization(period=five, statistic="Average"),
            threshold=config.database_cpu_percent, periods=3,
            what="Aurora CPU high for 15 minutes: raise max capacity or find the hot query.",
        )
        self._alarm(
            "DatabaseConnections", t.cluster.metric_database_connections(period=five, statistic="Maximum"),
            threshold=config.database_connections, periods=2,
            what="Aurora connections near the limit: ingest concurrency (pollers) too high?",
        )
        self.dashboard = self._dashboard(environment, targets)

    def _topic(self, config: AlarmConfig) -> sns.ITopic:
        if config.sns_topic_arn:
            return sns.Topic.from_topic_arn(self, "AlarmTopic", config.sns_topic_arn)
        key = kms.Key(self, "AlarmTopicKey", enable_key_rotation=True, description="Consolidator alarm topic")
        key.add_to_resource_policy(iam.PolicyStatement(
            sid="CloudWatchAlarmsPublish",
            principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            actions=["kms:Decrypt", "kms:GenerateDataKey"],
            resources=["*"],  # in a key policy, "*" means this key
        ))
        topic = sns.Topic(self, "AlarmTopic", master_key=key, enforce_ssl=True, display_name="Consolidator alarms")
        if config.email:
            topic.add_subscription(subscriptions.EmailSubscription(config.email))
        return topic

    def _alarm(
        self, name: str, metric: cw.IMetric, *, threshold: float, what: str, periods: int = 1,
        comparison: cw.ComparisonOperator = cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        missing: cw.TreatMissingData = cw.TreatMissingData.NOT_BREACHING,
    ) -> cw.Alarm:
        alarm = cw.Alarm(
            self, name,
            metric=metric,
            threshold=threshold,
            evaluation_periods=periods,
            datapoints_to_alarm=periods,
            comparison_operator=comparison,
            treat_missing_data=missing,
            alarm_description=f"{what} Runbook: {RUNBOOK} ({name}).",
        )
        alarm.add_alarm_action(cw_actions.SnsAction(self.topic))
        alarm.add_ok_action(cw_actions.SnsAction(self.topic))
        self.alarms[name] = alarm
        return alarm

    def _dashboard(self, environment: str, t: Monitored) -> cw.Dashboard:
        def graph(title: str, metrics: list[cw.IMetric], right: list[cw.IMetric] | None = None) -> cw.GraphWidget:
            return cw.GraphWidget(title=title, left=metrics, right=right or [], width=8, height=6)

        reasons = [
            product_metric(f"BatchesFlushed{reason}", "flush").with_(label=reason.lower())
            for reason in ("Idle", "HardWindow", "Full")
        ]
        dashboard = cw.Dashboard(self, "Dashboard", dashboard_name=f"consolidator-{environment}")
        dashboard.add_widgets(
            graph("Ingested / coalesced records", [
                product_metric("RecordsIngested", "ingest"), product_metric("RecordsCoalesced", "ingest"),
                product_metric("RecordsReplayed", "ingest"),
            ], [product_metric("RecordsDeadLettered", "ingest"), product_metric("RecordsFailed", "ingest")]),
            graph("Batches by reason", reasons, [product_metric("BatchesFlushed", "flush")]),
            graph("Batch size", [
                product_metric("BatchSize", "flush", "Average"), product_metric("BatchSize", "flush", "Maximum"),
            ]),
        )
        dashboard.add_widgets(
            graph("Event-to-publish latency (ms)", [
                product_metric("EventToPublishLatency", "flush", "p50"),
                product_metric("EventToPublishLatency", "flush", "p99"),
                product_metric("EventToPublishLatency", "flush", "Maximum"),
            ]),
            graph("Pending: oldest age (ms)", [product_metric("OldestPendingAge", "flush", "Maximum")],
                  [product_metric("TicksSkipped", "flush"), product_metric("PublishFailures", "flush"),
                   product_metric("DeadBatches", "flush")]),
            graph("Ingest offset lag (records)", [t.ingest.metric("OffsetLag", statistic="Maximum")]),
        )
        dashboard.add_widgets(
            graph("Function errors", [f.metric_errors() for f in (t.ingest, t.flush, t.cleanup)],
                  [f.metric_throttles() for f in (t.ingest, t.flush, t.cleanup)]),
            graph("Dead-letter queues", [
                t.dead_letter.metric_approximate_number_of_messages_visible(),
                t.ingest_failures.metric_approximate_number_of_messages_visible(),
            ]),
            graph("Aurora", [t.cluster.metric_cpu_utilization()], [t.cluster.metric_database_connections()]),
        )
        return dashboard
