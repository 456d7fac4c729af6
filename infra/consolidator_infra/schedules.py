"""Schedules: flush every minute, cleanup daily.

The flush tick must never pile up: the rule target and the function's asynchronous
configuration both allow no retries and a 60 s maximum event age (the minimum), and the flush
function has a reserved concurrency of 1, so a tick that finds the previous one still running
is throttled and then dropped, not queued.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

FLUSH_MAX_EVENT_AGE = Duration.seconds(60)


class Schedules(Construct):
    def __init__(
        self, scope: Construct, id: str, *, flush: lambda_.Function, cleanup: lambda_.Function, cleanup_hour_utc: int,
    ) -> None:
        super().__init__(scope, id)
        flush.configure_async_invoke(retry_attempts=0, max_event_age=FLUSH_MAX_EVENT_AGE)
        self.flush_rule = events.Rule(
            self, "FlushEveryMinute",
            description="Consolidator flush tick (the function ticks every tick_interval inside)",
            schedule=events.Schedule.rate(Duration.minutes(1)),
            targets=[targets.LambdaFunction(flush, retry_attempts=0, max_event_age=FLUSH_MAX_EVENT_AGE)],
        )
        cleanup.configure_async_invoke(retry_attempts=2, max_event_age=Duration.hours(1))
        self.cleanup_rule = events.Rule(
            self, "CleanupDaily",
            description="Consolidator partitions: create ahead, drop fully sent old ones",
            schedule=events.Schedule.cron(minute="17", hour=str(cleanup_hour_utc)),
            targets=[targets.LambdaFunction(cleanup, retry_attempts=2, max_event_age=Duration.hours(1))],
        )
