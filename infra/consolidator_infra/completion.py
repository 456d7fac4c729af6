"""Batch completion tracking on AWS: the acks queue and its dead-letter queue, the acks
function's SQS event source (partial batch failures) and sweep schedule, and its alarms.

The acks function itself comes from the stack's one function factory; this construct wires
what is specific to it. Only the environment's ``completion.senders`` may send acks: the
queue's policy allows them ``sqs:SendMessage`` and denies it to every other principal (an
IAM policy elsewhere in the account cannot open it). The event source runs at most
``completion.max_concurrency`` instances, so an ack flood holds that many database
connections at most.
"""

from __future__ import annotations

from aws_cdk import CfnOutput, Duration, RemovalPolicy
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from consolidator_infra.config import CompletionConfig
from consolidator_infra.monitoring import Monitoring, Severity, product_metric


class CompletionTracking(Construct):
    def __init__(
        self, scope: Construct, id: str, *, config: CompletionConfig, function: lambda_.Function,
        monitoring: Monitoring, removal_policy: RemovalPolicy,
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
        senders = config.sender_principal_arns()
        self.queue.add_to_resource_policy(iam.PolicyStatement(
            sid="AckSenders", actions=["sqs:SendMessage"], resources=[self.queue.queue_arn],
            principals=[iam.AccountPrincipal(s) if s.isdigit() else iam.ArnPrincipal(s) for s in config.senders],
        ))
        self.queue.add_to_resource_policy(iam.PolicyStatement(
            sid="OnlyAckSenders", effect=iam.Effect.DENY, actions=["sqs:SendMessage"],
            resources=[self.queue.queue_arn], principals=[iam.AnyPrincipal()],
            conditions={"ArnNotLike": {"aws:PrincipalArn": senders}},
        ))
        function.add_event_source(sources.SqsEventSource(
            self.queue, batch_size=config.batch_size, report_batch_item_failures=True,
            max_concurrency=config.max_concurrency,
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
        env = monitoring.environment
        self.alarms = {name: monitoring.alarm(name, severity, metric, threshold=threshold, what=what)
                       for name, severity, metric, threshold, what in (
            ("AcksDeadLetterNotEmpty", Severity.CRITICAL,
             self.dead_letter.metric_approximate_number_of_messages_visible(period=period, statistic="Maximum"),
             0, ("Acks failed max_receive_count times (not applied: an unexpected error on them; refused"
                 " acks are counted in AcksRefused and never land here).")),
            ("AcksErrors", Severity.CRITICAL, function.metric_errors(period=period, statistic="Sum"),
             monitoring.config.function_errors, "The acks function raised errors (database down?); SQS retries its acks."),
            ("IncompleteBatches", Severity.WARNING, product_metric("IncompleteBatches", "acks", env, "Maximum", period),
             0, f"Sent batches are not completely acknowledged {config.deadline_seconds} s after their seal."),
            ("CompletionPublishFailures", Severity.WARNING,
             product_metric("CompletionPublishFailures", "acks", env, period=period), 0,
             "The completion sink did not confirm completion messages; the sweep re-publishes them."),
        )}
        CfnOutput(self, "AcksQueueUrl", value=self.queue.queue_url, description="where downstream sends acks")
        CfnOutput(self, "AcksQueueArn", value=self.queue.queue_arn, description="grant sqs:SendMessage on this")
