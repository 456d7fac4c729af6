"""Schema migration on deploy: a CDK trigger invokes the migrate function once the database is
up, synchronously; a failed migration fails the deployment. Runs again whenever the migrate
function's code (which carries the migrations) changes; migrations are idempotent.
"""

from __future__ import annotations

from aws_cdk import Duration, triggers
from aws_cdk import aws_lambda as lambda_
from constructs import Construct, IConstruct


class MigrationTrigger(Construct):
    def __init__(self, scope: Construct, id: str, *, function: lambda_.Function, after: list[IConstruct]) -> None:
        super().__init__(scope, id)
        self.trigger = triggers.Trigger(
            self, "Trigger",
            handler=function,
            execute_after=after,
            execute_on_handler_change=True,
            invocation_type=triggers.InvocationType.REQUEST_RESPONSE,
            timeout=Duration.minutes(5),
        )
