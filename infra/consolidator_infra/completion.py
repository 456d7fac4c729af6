"""Batch completion tracking on AWS: the acks queue and its dead-letter queue, the acks
function's SQS event source (partial batch failures) and sweep schedule, and its alarms.

The acks function itself comes from the stack's one function factory; this construct wires
what is specific to it. Downstream producers of acks need ``sqs:SendMessage`` on
``queue`` (its URL and ARN are stack outputs).
"""

from __future__ import annotations

from aws_cdk import CfnOutput, Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from consolidator_infra.config import AlarmConfig, CompletionConfig
from consolidator_infra.monitoring import RUNBOOK, product_metric


class CompletionTracking(Construct):
    def __init__(
        self, scope: Construct, id: str, *, config: CompletionConfig, function: lambda_.Function,
        alarms: AlarmConfig, topic: sns.ITopic, removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, id)
        queue_defaults = {"encryption": sqs.QueueEncryption.SQS_MANAGED, "enforce_ssl": True,
                          "retention_period": Duration.days(14), "removal_policy": removal_policy}
        self.dead_letter = sqs.Queue(self, "AcksDeadLetter", **queue_defaults)
        self.queue = sqs.Queue(
            self, "Acks",
            visibility_timeout=Duration.seconds(6 * config.timeout_seconds),  # AWS guidance for event sources
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dead_letter, max_receive_count=config.max_receive_count),
            **queue_defaults,
        )
        function.add_event_source(sources.SqsEventSource(
            self.queue, batch_size=config.batch_size, report_batch_item_failures=True,
            max_batching_window=Duration.seconds(config.max_batching_window_seconds) if config.max_batching_window_seconds else None,
        ))
        function.configure_async_invoke(retry_attempts=0, max_event_age=Duration.minutes(config.sweep_minutes))
        self.sweep_rule = events.Rule(
            self, "Sweep",
            description="Consolidator completion sweep: re-publish pending completions, count overdue batches",
            schedule=events.Schedule.rate(Duration.minutes(config.sweep_minutes)),
            targets=[targets.LambdaFunction(function, retry_attempts=0,
                                            max_event_age=Duration.minutes(config.sweep_minutes))],
        )
        period = Duration.minutes(max(5, config.sweep_minutes))
        self.alarms: dict[str, cw.Alarm] = {}
        for name, metric, threshold, what in (
            ("AcksDeadLetterNotEmpty",
             self.dead_letter.metric_approximate_number_of_messages_visible(period=period, statistic="Maximum"), 0,
             "Acks refused max_receive_count times (unknown batch or member, malformed): see the acks logs."),
            ("AcksErrors", function.metric_errors(period=period, statistic="Sum"), alarms.function_errors,
             "The acks function raised errors (database down?); its acks are retried by SQS."),
            ("IncompleteBatches", product_metric("IncompleteBatches", "acks", "Maximum", period), 0,
             (f"Sent batches not completely acknowledged {config.deadline_seconds} s after their seal: "
              "`consolidator batch list --incomplete`.")),
            ("CompletionPublishFailures", product_metric("CompletionPublishFailures", "acks", period=period), 0,
             "Completion messages not confirmed by the completion sink; the sweep re-publishes them."),
        ):
            alarm = cw.Alarm(
                self, name, metric=metric, threshold=threshold, evaluation_periods=1, datapoints_to_alarm=1,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
                alarm_description=f"{what} Runbook: {RUNBOOK} ({name}).",
            )
            alarm.add_alarm_action(cw_actions.SnsAction(topic))
            alarm.add_ok_action(cw_actions.SnsAction(topic))
            self.alarms[name] = alarm
        CfnOutput(self, "AcksQueueUrl", value=self.queue.queue_url, description="where downstream sends acks")
        CfnOutput(self, "AcksQueueArn", value=self.queue.queue_arn, description="grant sqs:SendMessage on this")
