"""cdk-nag (AwsSolutions) suppressions, each scoped to the resources it concerns and with the
reason it is acceptable here. Anything not listed fails ``cdk synth`` and the infra tests.
"""

from __future__ import annotations

from typing import Any, Protocol

from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Node

MANAGED = "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"

MANAGED_EXECUTION_POLICIES = NagPackSuppression(
    id="AwsSolutions-IAM4",
    reason="AWS-managed Lambda execution policies: logs for the function's own log group, VPC "
           "network interfaces, and (ingest) the MSK event source poller. They are the documented "
           "minimum for these Lambda features and follow service changes.",
    applies_to=[
        f"{MANAGED}AWSLambdaBasicExecutionRole",
        f"{MANAGED}AWSLambdaVPCAccessExecutionRole",
        f"{MANAGED}AWSLambdaMSKExecutionRole",
    ],
)
XRAY = NagPackSuppression(
    id="AwsSolutions-IAM5",
    reason="X-Ray tracing: xray:PutTraceSegments and xray:PutTelemetryRecords do not support "
           "resource-level permissions, so their resource must be '*'.",
    applies_to=["Resource::*"],
)
PINNED_RUNTIME = NagPackSuppression(
    id="AwsSolutions-L1",
    reason="python3.12 is pinned on purpose: the bundle carries cp312 aarch64 wheels "
           "(infra/bundle.py); runtime and wheels are upgraded together.",
)
TERMINAL_QUEUE = NagPackSuppression(
    id="AwsSolutions-SQS3",
    reason="This queue is itself a terminal dead-letter destination (nothing consumes it "
           "automatically); an alarm fires as soon as it is not empty.",
)


class Suppressed(Protocol):
    """What :func:`suppress_findings` reads of the stack (``stack.ConsolidatorStack`` has it): the
    stack imports this module, so this module names the shape, not the class."""

    config: Any
    ingest: Any
    flush: Any
    cleanup: Any
    migrate: Any
    acks: Any
    dead_letters: Any
    completion: Any
    database: Any
    cache: Any
    node: Node


def suppress_findings(stack: Suppressed) -> None:
    config = stack.config
    for function in (stack.ingest, stack.flush, stack.cleanup, stack.migrate):
        NagSuppressions.add_resource_suppressions(function.role, [MANAGED_EXECUTION_POLICIES, XRAY], apply_to_children=True)
        NagSuppressions.add_resource_suppressions(function, [PINNED_RUNTIME])
    registry = stack.config.msk.schema_registry
    if registry is not None and registry.glue_registry_arn:  # Glue schema versions (value_format.py)
        NagSuppressions.add_resource_suppressions(stack.ingest.role, [NagPackSuppression(
            id="AwsSolutions-IAM5",
            reason="glue:GetSchemaVersion is granted on the schemas of the one configured registry"
                   " (schema/<registry>/*): a value names its schema version by id, and which schemas"
                   " the producers register there is only known at run time.",
            applies_to=[{"regex": "/^Resource::.*:schema/.*\\*.*$/"}],
        )], apply_to_children=True)
    for queue in (stack.dead_letters.queue, stack.dead_letters.ingest_failures):
        NagSuppressions.add_resource_suppressions(queue, [TERMINAL_QUEUE])
    if stack.completion is not None:  # batch completion tracking: the acks function and its DLQ
        NagSuppressions.add_resource_suppressions(stack.acks.role, [MANAGED_EXECUTION_POLICIES, XRAY], apply_to_children=True)
        NagSuppressions.add_resource_suppressions(stack.acks, [PINNED_RUNTIME])
        NagSuppressions.add_resource_suppressions(stack.completion.dead_letter, [TERMINAL_QUEUE])

    database = [
        NagPackSuppression(
            id="AwsSolutions-RDS11",
            reason="A non-default port is obscurity, not a control: the cluster is in isolated "
                   "subnets and its security group admits only the functions' groups, over TLS.",
        ),
        NagPackSuppression(
            id="AwsSolutions-RDS14",
            reason="Recovery uses point-in-time restore from continuous backups; the buffer's "
                   "source of truth is the Kafka topic, which can be replayed. Backtrack is not needed.",
        ),
    ]
    if not config.database.deletion_protection:
        database.append(NagPackSuppression(
            id="AwsSolutions-RDS10",
            reason=f"{config.name} is a disposable environment (deletion_protection false in its "
                   "environment file); prod keeps deletion protection on.",
        ))
    NagSuppressions.add_resource_suppressions(stack.database.cluster, database, apply_to_children=True)

    NagSuppressions.add_resource_suppressions(stack.cache.auth_secret, [NagPackSuppression(
        id="AwsSolutions-SMG4",
        reason="Rotating an ElastiCache AUTH token needs a coordinated ROTATE then SET update of "
               "the replication group; it is a runbook procedure (README.md, Secrets), not an "
               "automatic Secrets Manager rotation.",
    )])
    if config.cache.replicas == 0:
        NagSuppressions.add_resource_suppressions(stack.cache.group, [NagPackSuppression(
            id="AwsSolutions-AEC4",
            reason="Single node in this environment: the cache only holds the flush lock, an "
                   "efficiency measure; correctness never depends on it (docs/semantics.md section 5).",
        )])

    for child in stack.node.children:  # the singleton behind the cluster's log retention
        if child.node.id.startswith("LogRetention"):
            NagSuppressions.add_resource_suppressions(child, [
                NagPackSuppression(
                    id="AwsSolutions-IAM4", reason="CDK's log-retention helper uses the basic Lambda execution policy.",
                    applies_to=[f"{MANAGED}AWSLambdaBasicExecutionRole"],
                ),
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="CDK's log-retention helper sets retention on the cluster's log groups, "
                           "which it only knows at deploy time.",
                    applies_to=["Resource::*"],
                ),
            ], apply_to_children=True)
