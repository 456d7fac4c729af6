"""The spans of the use cases, by the OpenTelemetry messaging conventions (``messaging.*``),
made only while tracing is on (:func:`consolidator.support.tracing.tracer` is not None).

- ingest: one ``process {topic}`` span (CONSUMER) per ingest call, a child of the first
  record's trace context that has one (so a producer's trace continues into its ingest), linked
  to every distinct record context (at most ``MAX_LINKS``; ``consolidator.trace.contexts`` says how
  many there were); a record without trace headers or with a malformed ``traceparent`` adds
  nothing and is ingested as any other;
- publish: one ``send {destination}`` span (PRODUCER) per batch, a child of the context of the
  batch's first member that has one (batch order), linked to every distinct member context
  (same bound), with the batch's id, group, size, flush reason, attempt and wait. When a
  member has a context the span's id is the one the batch's own ``traceparent`` names (the
  message's field, :func:`~consolidator.rules.tracecontext.batch_traceparent`; the flush starts
  the span inside :func:`~consolidator.support.tracing.span_id_of`), so a downstream consumer
  continues the trace from the message.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from consolidator.rules.events import KafkaRecord
from consolidator.rules.tracecontext import TraceContext, trace_context
from consolidator.support import tracing


def _base(records: Sequence[KafkaRecord], consumer_group: str | None) -> dict:
    attributes: dict[str, object] = {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.operation.name": "ingest",
        "messaging.batch.message_count": len(records),
    }
    if consumer_group:
        attributes["messaging.consumer.group.name"] = consumer_group
    topics = {r.topic for r in records}
    if len(topics) == 1:
        attributes["messaging.destination.name"] = next(iter(topics))
        partitions = {r.partition for r in records}
        if len(partitions) == 1:
            attributes["messaging.destination.partition.id"] = str(next(iter(partitions)))
            if len(records) == 1:
                attributes["messaging.kafka.offset"] = records[0].offset
    return attributes


def record_contexts(records: Sequence[KafkaRecord]) -> list[TraceContext | None]:
    """The trace context of each of ``records`` (None: it has none), read once: the ingest span
    takes them all, and each event its own (:func:`consolidator.rules.events.decode`'s ``trace``)."""
    return [trace_context(headers) if (headers := r.headers) else None for r in records]


@contextlib.contextmanager
def ingest_span(records: Sequence[KafkaRecord], contexts: Sequence[TraceContext | None],
                consumer_group: str | None = None) -> Iterator[object | None]:
    """The span of one ingest call over ``records``, whose trace contexts are ``contexts``
    (:func:`record_contexts`); None, and nothing made, while tracing is off."""
    tracer = tracing.tracer()
    if tracer is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    parent, links, count = tracing.parent_and_links(contexts)
    attributes = _base(records, consumer_group) | {"consolidator.trace.contexts": count}
    name = f"process {attributes.get('messaging.destination.name', 'kafka')}"  # the one topic, if one
    with tracer.start_as_current_span(name, context=parent, kind=SpanKind.CONSUMER, links=links,
                                      attributes=attributes) as span:
        yield span


def start_publish_span(destination: str, system: str, batch_id: str, group_key: str, reason: str, size: int,
                       attempt: int, wait_ms: int, contexts: Sequence[TraceContext]):
    """The started (not current) span of one batch's publish; the caller ends it once the sink
    answered (:func:`end_publish_span`). Call only while tracing is on."""
    from opentelemetry.trace import SpanKind

    tracer = tracing.tracer()
    parent, links, count = tracing.parent_and_links(contexts)
    return tracer.start_span(f"send {destination}", context=parent, kind=SpanKind.PRODUCER, links=links, attributes={
        "messaging.system": system,
        "messaging.operation.type": "send",
        "messaging.operation.name": "publish",
        "messaging.destination.name": destination,
        "messaging.message.id": batch_id,
        "consolidator.batch.id": batch_id,
        "consolidator.batch.group_key": group_key,
        "consolidator.batch.size": size,
        "consolidator.batch.flush_reason": reason,
        "consolidator.batch.attempt": attempt,
        "consolidator.batch.wait_ms": wait_ms,
        "consolidator.trace.contexts": count,
    })


def end_publish_span(span, error: str | None) -> None:
    """End a publish span: an error status with the sink's error when it refused the batch."""
    from opentelemetry.trace import Status, StatusCode

    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error[:1024]))
    span.end()
