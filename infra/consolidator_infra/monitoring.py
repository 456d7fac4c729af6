"""Monitoring: the on-call alarms of docs/runbook.md and one dashboard.

Product metrics come from Powertools EMF in namespace ``Consolidator`` with dimensions
``service`` = ingest | flush | cleanup and ``environment`` = the environment name (the
functions get it as ``CONSOLIDATOR_ENVIRONMENT``). Every alarm:
- is named ``consolidator-<environment>-<Name>`` and says WARNING or CRITICAL first;
- has its threshold in the unit a person reads (seconds, minutes, percent, counts);
- links to ``<alarms.runbook_base_url>#<name in lower case>`` (a heading of docs/runbook.md);
- notifies the alarm topic (created, KMS-encrypted, with an optional e-mail subscription, or
  an existing topic) when it fires and when it returns to OK.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_rds as rds
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from consolidator.services.panels import CLOUDWATCH_STATS, PANELS, Series
from consolidator_infra.config import AlarmConfig, DatabaseConfig, FunctionsConfig
from consolidator_infra.config_policy import PolicyConfig

NAMESPACE = "Consolidator"
MINUTE = Duration.minutes(1)
FIVE = Duration.minutes(5)


class Severity(StrEnum):
    WARNING = "WARNING"  # act within the working day: a guarantee is at risk
    CRITICAL = "CRITICAL"  # act now: a guarantee is broken or data waits for an operator


@dataclass(frozen=True)
class Monitored:
    ingest: lambda_.Function
    flush: lambda_.Function
    cleanup: lambda_.Function
    dead_letter: sqs.IQueue
    ingest_failures: sqs.IQueue
    cluster: rds.DatabaseCluster
    cache: elasticache.CfnReplicationGroup


def product_metric(name: str, service: str, environment: str, statistic: str = "Sum",
                   period: Duration | None = None, label: str | None = None) -> cw.Metric:
    return cw.Metric(
        namespace=NAMESPACE, metric_name=name, dimensions_map={"service": service, "environment": environment},
        statistic=statistic, period=period or MINUTE, label=label or name,
    )


def cloudwatch_series(series: Series, environment: str) -> cw.IMetric:
    """A panel's series on the functions' EMF metric: its statistic, milliseconds shown as seconds."""
    metric = series.definition
    stat = CLOUDWATCH_STATS[series.stat]
    if metric.unit == "Milliseconds":
        return scaled(product_metric(metric.name, metric.source, environment, stat), 1000, series.label)
    return product_metric(metric.name, metric.source, environment, stat, label=series.label)


def scaled(metric: cw.IMetric, divisor: int, label: str, period: Duration | None = None) -> cw.MathExpression:
    """``metric / divisor`` (milliseconds to seconds, seconds to hours) under a human label."""
    key = "m_" + re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")  # unique per graph
    return cw.MathExpression(expression=f"{key} / {divisor}", using_metrics={key: metric}, label=label,
                             period=period or MINUTE)


class Monitoring(Construct):
    def __init__(
        self, scope: Construct, id: str, *, config: AlarmConfig, policy: PolicyConfig, functions: FunctionsConfig,
        database: DatabaseConfig, targets: Monitored, environment: str,
    ) -> None:
        super().__init__(scope, id)
        self.config = config
        self.environment = environment
        self.topic = self._topic(config)
        self.alarms: dict[str, cw.Alarm] = {}
        t = targets
        env = environment

        # -- latency (invariant T: published within hard_window + tick_interval) ----------------
        bound_s = policy.hard_window_seconds + policy.tick_interval_seconds
        pending_age_s = scaled(product_metric("OldestPendingAge", "flush", env, "Maximum"), 1000,
                               "oldest PENDING event age (s)")
        self.alarm(
            "PendingAgeWarning", Severity.WARNING, pending_age_s, threshold=bound_s, periods=2,
            what=f"The oldest PENDING event is older than the latency bound (hard window + one tick = "
                 f"{bound_s:.0f} s) for 2 minutes: the flush is a tick behind.",
        )
        self.alarm(
            "PendingAgeCritical", Severity.CRITICAL, pending_age_s, threshold=bound_s + policy.tick_interval_seconds,
            periods=2,
            what=f"The oldest PENDING event is older than {bound_s + policy.tick_interval_seconds:.0f} s: events "
                 "are published later than the latency guarantee; the flush is not keeping up or not publishing.",
        )
        self.alarm(
            "DeadBatches", Severity.CRITICAL, product_metric("DeadBatches", "flush", env, period=FIVE), threshold=0,
            what="A batch failed max_attempts publishes and went to the dead-letter queue; its rows are unsent.",
        )
        self.alarm(
            "BatchBuildFailures", Severity.CRITICAL,
            product_metric("BatchBuildFailures", "flush", env, period=FIVE), threshold=0,
            what="The flush could not build a batch's message or read its rows (a bug or an unreadable row): "
                 "that batch is retried each tick and dead-lettered after max_attempts; the log has the traceback.",
        )
        self.alarm(
            "RecordsFailed", Severity.CRITICAL, product_metric("RecordsFailed", "ingest", env), threshold=0,
            periods=config.records_failed_minutes,
            what=f"Ingest reported records as failed in each of {config.records_failed_minutes} minutes: the "
                 "database or the dead-letter queue is down; the partitions are stalled and retried.",
        )

        self.alarm(
            "EventsExpired", Severity.WARNING, product_metric("EventsExpired", "flush", env, period=FIVE), threshold=0,
            what="Buffered events outlived the event TTL and went to the dead-letter queue as 'expired' "
                 "(a throttled group's backlog, or a flush that is not keeping up).",
        )

        # -- operator queues ------------------------------------------------------------------------
        for name, queue in (("DeadLetterQueueNotEmpty", t.dead_letter), ("IngestFailuresNotEmpty", t.ingest_failures)):
            self.alarm(
                name, Severity.WARNING,
                queue.metric_approximate_number_of_messages_visible(period=FIVE, statistic="Maximum",
                                                                     label="visible messages"),
                threshold=0, what=f"{name}: entries wait for an operator (poison events, dead batches or given-up offsets).",
            )
        oldest_dead_letter_h = scaled(
            t.dead_letter.metric_approximate_age_of_oldest_message(period=FIVE, statistic="Maximum"), 3600,
            "oldest dead-letter message (h)", FIVE)
        self.alarm(
            "DeadLetterAgeWarning", Severity.WARNING, oldest_dead_letter_h, threshold=config.dead_letter_age_warning_hours,
            what=f"A dead-letter message is older than {config.dead_letter_age_warning_hours:g} h: nobody has "
                 "handled it yet.",
        )
        self.alarm(
            "DeadLetterAgeCritical", Severity.CRITICAL, oldest_dead_letter_h,
            threshold=config.dead_letter_age_critical_days * 24,
            what=f"A dead-letter message is older than {config.dead_letter_age_critical_days:g} days; the queue "
                 "deletes messages after 14 days, and then the entry is lost.",
        )

        # -- functions ------------------------------------------------------------------------------
        for label, function, timeout_s in (("Ingest", t.ingest, functions.ingest_timeout_seconds),
                                           ("Flush", t.flush, functions.flush_timeout_seconds),
                                           ("Cleanup", t.cleanup, functions.cleanup_timeout_seconds)):
            self.alarm(
                f"{label}Errors", Severity.CRITICAL, function.metric_errors(period=FIVE, statistic="Sum", label="errors"),
                threshold=config.function_errors, what=f"The {label.lower()} function raised errors.",
            )
            if label == "Flush":  # one scheduled tick at a time: a few throttles are expected
                metric = function.metric_throttles(period=Duration.minutes(15), statistic="Sum", label="throttles")
                threshold = config.flush_throttles
            else:
                metric = function.metric_throttles(period=FIVE, statistic="Sum", label="throttles")
                threshold = config.function_throttles
            self.alarm(f"{label}Throttles", Severity.WARNING, metric, threshold=threshold,
                        what=f"The {label.lower()} function is throttled.")
            # the flush ticks until shortly before its timeout by design: only a near-timeout counts
            near_s = timeout_s - 1 if label == "Flush" else timeout_s * config.duration_warning_percent / 100
            self.alarm(
                f"{label}DurationNearTimeout", Severity.WARNING,
                scaled(function.metric_duration(period=FIVE, statistic="Maximum"), 1000, "max duration (s)", FIVE),
                threshold=round(near_s, 1),
                what=f"The {label.lower()} function ran longer than {near_s:.1f} s of its {timeout_s} s timeout: "
                     "it is about to time out (a timed-out ingest batch is retried; a flush tick is cut short).",
            )
        self.alarm(
            "IngestOffsetLag", Severity.WARNING,
            t.ingest.metric("OffsetLag", statistic="Maximum", period=MINUTE, label="offset lag (records)"),
            threshold=config.offset_lag_records, periods=5,
            what="Ingest falls behind the topic (records not yet processed) for 5 minutes.",
        )
        self.alarm(
            "FlushTicksSkipped", Severity.CRITICAL, product_metric("TicksSkipped", "flush", env),
            threshold=0, periods=config.skipped_ticks_minutes,
            what=f"Flush ticks skipped (lock held or Redis down) in each of {config.skipped_ticks_minutes} minutes.",
        )
        self.alarm(
            "FlushNotRunning", Severity.CRITICAL, t.flush.metric_invocations(period=FIVE, statistic="Sum", label="invocations"),
            threshold=1, comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            missing=cw.TreatMissingData.BREACHING,
            what="The flush function was not invoked for 5 minutes (schedule disabled or broken).",
        )
        self.alarm(
            "PartitionDropRefused", Severity.WARNING,
            product_metric("PartitionDropsRefused", "cleanup", env, period=Duration.hours(6)), threshold=0,
            what="Cleanup refused to drop a partition past the retention because it still holds PENDING or "
                 "CLAIMED rows: something old was never sent.",
        )

        # -- storage --------------------------------------------------------------------------------
        self.alarm(
            "DatabaseCpu", Severity.WARNING,
            t.cluster.metric_cpu_utilization(period=FIVE, statistic="Average", label="CPU (%)"),
            threshold=config.database_cpu_percent, periods=3,
            what="Aurora CPU high for 15 minutes: raise max capacity or find the hot query.",
        )
        self.alarm(
            "DatabaseCapacityAtMax", Severity.CRITICAL,
            t.cluster.metric("ACUUtilization", period=FIVE, statistic="Maximum", label="capacity used (% of max ACU)"),
            threshold=config.database_capacity_percent, periods=3,
            what=f"Aurora Serverless runs at its maximum capacity ({database.max_capacity:g} ACU) for 15 minutes: "
                 "it cannot scale further; raise database.max_capacity.",
        )
        self.alarm(
            "DatabaseConnections", Severity.WARNING,
            t.cluster.metric_database_connections(period=FIVE, statistic="Maximum", label="connections"),
            threshold=config.database_connections, periods=2,
            what="Aurora connections near the limit: ingest concurrency (pollers) too high?",
        )
        primary = {"CacheClusterId": f"{t.cache.ref}-001"}  # the primary node of the replication group
        self.alarm(
            "CacheCpu", Severity.WARNING,
            cw.Metric(namespace="AWS/ElastiCache", metric_name="EngineCPUUtilization", dimensions_map=primary,
                      statistic="Average", period=FIVE, label="cache engine CPU (%)"),
            threshold=config.cache_cpu_percent, periods=3,
            what="The cache engine CPU is high for 15 minutes: the flush lock may time out.",
        )
        self.alarm(
            "CacheMemory", Severity.WARNING,
            cw.Metric(namespace="AWS/ElastiCache", metric_name="DatabaseMemoryUsagePercentage",
                      dimensions_map=primary, statistic="Maximum", period=FIVE, label="cache memory used (%)"),
            threshold=config.cache_memory_percent, periods=2,
            what="The cache is nearly full: the lock key may be evicted or refused.",
        )
        self._dashboard_inputs = (environment, targets, policy)

    def add_dashboard(self) -> cw.Dashboard:
        """The dashboard, its alarm-status widget listing every alarm made so far: call it once
        the stack's other constructs (completion tracking) have added theirs."""
        self.dashboard = self._dashboard(*self._dashboard_inputs)
        return self.dashboard

    def runbook_url(self, name: str) -> str:
        return f"{self.config.runbook_base_url}#{name.lower()}"

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

    def alarm(
        self, name: str, severity: Severity, metric: cw.IMetric, *, threshold: float, what: str, periods: int = 1,
        comparison: cw.ComparisonOperator = cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        missing: cw.TreatMissingData = cw.TreatMissingData.NOT_BREACHING,
    ) -> cw.Alarm:
        alarm = cw.Alarm(
            self, name,
            alarm_name=f"consolidator-{self.environment}-{name}",
            metric=metric,
            threshold=threshold,
            evaluation_periods=periods,
            datapoints_to_alarm=periods,
            comparison_operator=comparison,
            treat_missing_data=missing,
            alarm_description=f"{severity}: {what} Runbook: {self.runbook_url(name)}",
        )
        alarm.add_alarm_action(cw_actions.SnsAction(self.topic))
        alarm.add_ok_action(cw_actions.SnsAction(self.topic))
        self.alarms[name] = alarm
        return alarm

    def _line(self, name: str, label: str | None = None) -> cw.HorizontalAnnotation:
        """The alarm's threshold as a line on a graph."""
        alarm = self.alarms[name]
        threshold = alarm.node.default_child.threshold
        return cw.HorizontalAnnotation(value=threshold, label=label or f"{name} ({threshold:g})")

    def _dashboard(self, environment: str, t: Monitored, policy: PolicyConfig) -> cw.Dashboard:
        def graph(title: str, left: list[cw.IMetric], right: list[cw.IMetric] | None = None,
                  lines: list[cw.HorizontalAnnotation] | None = None, left_label: str = "",
                  right_label: str = "") -> cw.GraphWidget:
            return cw.GraphWidget(
                title=title, left=left, right=right or [], width=8, height=6, left_annotations=lines or [],
                left_y_axis=cw.YAxisProps(label=left_label, show_units=False),
                right_y_axis=cw.YAxisProps(label=right_label, show_units=False),
            )

        env = environment
        dashboard = cw.Dashboard(self, "Dashboard", dashboard_name=f"consolidator-{environment}")
        dashboard.add_widgets(cw.AlarmStatusWidget(
            title="Alarms (red: firing)", alarms=list(self.alarms.values()), width=24, height=4,
            sort_by=cw.AlarmStatusWidgetSortBy.STATE_UPDATED_TIMESTAMP,
        ))
        # the product panels: the one list both dashboards draw (consolidator.services.panels)
        bound = policy.hard_window_seconds + policy.tick_interval_seconds
        lines = {
            "Batch size (members)": [cw.HorizontalAnnotation(value=policy.max_batch_size, label="max_batch_size")],
            "Event-to-publish latency (seconds)": [
                cw.HorizontalAnnotation(value=bound, label=f"latency bound ({bound:g} s)")],
            "Oldest PENDING event (seconds)": [self._line("PendingAgeWarning", "warning"),
                                               self._line("PendingAgeCritical", "critical")],
        }
        product: dict[str, cw.GraphWidget] = {}
        for panel in PANELS:
            left = [cloudwatch_series(s, env) for s in panel.left if s.on_functions]
            right = [cloudwatch_series(s, env) for s in panel.right if s.on_functions]
            if left or right:
                product[panel.title] = graph(panel.title, left, right, lines=lines.get(panel.title),
                                             left_label=panel.left_label, right_label=panel.right_label)
        dashboard.add_widgets(*(product.pop(title) for title in (
            "Ingest (records per minute)", "Batches per minute by reason", "Batch size (members)")))
        dashboard.add_widgets(
            product.pop("Event-to-publish latency (seconds)"), product.pop("Oldest PENDING event (seconds)"),
            graph("Ingest offset lag (records)",
                  [t.ingest.metric("OffsetLag", statistic="Maximum", label="offset lag")],
                  lines=[self._line("IngestOffsetLag", "alarm")], left_label="records"),
        )
        dashboard.add_widgets(
            graph("Function errors and throttles",
                  [f.metric_errors(label=f"{name} errors") for name, f in
                   (("ingest", t.ingest), ("flush", t.flush), ("cleanup", t.cleanup))],
                  [f.metric_throttles(label=f"{name} throttles") for name, f in
                   (("ingest", t.ingest), ("flush", t.flush), ("cleanup", t.cleanup))],
                  left_label="errors", right_label="throttles"),
            graph("Function duration, max (seconds)",
                  [scaled(f.metric_duration(statistic="Maximum"), 1000, f"{name} (s)") for name, f in
                   (("ingest", t.ingest), ("flush", t.flush), ("cleanup", t.cleanup))],
                  lines=[self._line("IngestDurationNearTimeout", "ingest near timeout"),
                         self._line("FlushDurationNearTimeout", "flush near timeout")],
                  left_label="seconds"),
            graph("Dead-letter queues", [
                t.dead_letter.metric_approximate_number_of_messages_visible(label="dead letter: messages"),
                t.ingest_failures.metric_approximate_number_of_messages_visible(label="ingest failures: messages"),
            ], [scaled(t.dead_letter.metric_approximate_age_of_oldest_message(statistic="Maximum"), 3600,
                       "dead letter: oldest (h)")], left_label="messages", right_label="hours"),
        )
        dashboard.add_widgets(
            graph("Aurora", [t.cluster.metric_cpu_utilization(label="CPU (%)"),
                             t.cluster.metric("ACUUtilization", statistic="Maximum", label="capacity used (% of max)")],
                  [t.cluster.metric_database_connections(label="connections")],
                  lines=[self._line("DatabaseCpu", "CPU alarm"), self._line("DatabaseCapacityAtMax", "at max")],
                  left_label="percent", right_label="connections"),
            graph("Cache (flush lock)", [
                cw.Metric(namespace="AWS/ElastiCache", metric_name="EngineCPUUtilization",
                          dimensions_map={"CacheClusterId": f"{t.cache.ref}-001"}, label="engine CPU (%)"),
                cw.Metric(namespace="AWS/ElastiCache", metric_name="DatabaseMemoryUsagePercentage",
                          dimensions_map={"CacheClusterId": f"{t.cache.ref}-001"}, label="memory used (%)"),
            ], lines=[self._line("CacheCpu", "CPU alarm")], left_label="percent"),
            product.pop("Cleanup (per run)"),
        )
        if product:  # panels added to the list later
            dashboard.add_widgets(*product.values())
        return dashboard
