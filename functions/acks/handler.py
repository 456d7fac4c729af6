"""Acks Lambda: member acks from SQS -> completion trackers (partial batch failures), and on
its schedule the sweep (re-publish pending completions, count overdue batches).

One SQS record is one ack, one unit of work. An ack refused for good (malformed, without its
batch's ack token, unknown batch or member) is counted once and consumed: retrying it would
change nothing. Powertools ``BatchProcessor`` reports exactly the acks that failed (not
applied: an unexpected error on that ack alone) as batch item failures; SQS retries them and
moves them to the acks dead-letter queue after maxReceiveCount. The acks of one invocation are
applied in one database transaction, before the per-record pass; completions are published
after its commit.
"""

from functools import cache

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from consolidator.rules.errors import ConsolidatorError
from consolidator.services.acks import AckService, build_ack_service
from consolidator.settings import AckSettings, load_settings
from consolidator.support import tracing
from consolidator.support.function_logging import configure_function_logging

logger = Logger(service="consolidator-acks")
metrics = Metrics(namespace="Consolidator", service="acks")
tracing.configure("consolidator-acks")  # OTEL_* variables; off unless OTEL_TRACES_EXPORTER is set
configure_function_logging(logger)  # the SDK's loggers stay at WARNING or above


class AckFailed(ConsolidatorError):
    """The ack was not applied (the message says why); SQS retries it, then dead-letters it."""


@cache
def service() -> AckService:
    """Built on the first invocation (settings validated then), reused while the container lives."""
    settings = load_settings(AckSettings)
    metrics.set_default_dimensions(environment=settings.environment)  # the alarms select on it
    return build_ack_service(settings, metrics)


@logger.inject_lambda_context
@tracing.flushed
@metrics.log_metrics
def handler(event: dict, context) -> dict:
    if event.get("source") == "aws.events":  # the schedule
        return service().sweep().as_dict()
    outcome = service().handle_bodies({r["messageId"]: r["body"] for r in event.get("Records", [])})

    def record_handler(record: SQSRecord) -> None:
        if reason := outcome[record.message_id]:
            raise AckFailed(reason)

    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    return process_partial_response(event=event, record_handler=record_handler, processor=processor,
                                    context=context)
