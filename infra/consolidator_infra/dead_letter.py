"""Dead-letter queues.

* ``queue``: the product's dead-letter destination (poison events from ingest, DEAD batches
  from flush), ``CONSOLIDATOR_DEAD_LETTER_URL``. Anything here needs an operator.
* ``ingest_failures``: the on-failure destination of the MSK event source mapping: metadata of
  record batches Lambda gave up on after the bounded retries (offsets to replay).

Both encrypted, TLS-only, 14 days retention. Not empty = alarm.
"""

from __future__ import annotations

from aws_cdk import Aws, Duration, RemovalPolicy
from aws_cdk import aws_sqs as sqs
from constructs import Construct


class DeadLetterQueues(Construct):
    def __init__(self, scope: Construct, id: str, *, removal_policy: RemovalPolicy) -> None:
        super().__init__(scope, id)
        self.queue = self._queue("DeadLetter", removal_policy)
        self.ingest_failures = self._queue("IngestFailures", removal_policy)

    def _queue(self, id: str, removal_policy: RemovalPolicy) -> sqs.Queue:
        return sqs.Queue(
            self, id,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
            removal_policy=removal_policy,
        )

    @property
    def url(self) -> str:
        """``sqs://sqs.<region>.amazonaws.com/<account>/<queue>`` as the settings expect."""
        return f"sqs://sqs.{Aws.REGION}.{Aws.URL_SUFFIX}/{Aws.ACCOUNT_ID}/{self.queue.queue_name}"
