"""OpenTelemetry tracing, configured by the standard ``OTEL_*`` variables; off unless asked for.

Tracing is on when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``: OTLP over HTTP/protobuf,
``OTEL_EXPORTER_OTLP_ENDPOINT`` and the other ``OTEL_EXPORTER_OTLP_*`` variables; ``console``:
the SDK's console exporter, one JSON span per line on standard error, so a command's ``--json``
document stays alone on standard output) and ``OTEL_SDK_DISABLED`` is not ``true``. Unlike
``opentelemetry-instrument`` (whose default exporter is ``otlp``), an unset variable means off:
then :func:`tracer` is None, nothing of the SDK is imported and the callers skip every span
(tracing off costs one ``is None`` test per invocation). The sampler (``OTEL_TRACES_SAMPLER``),
the resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``) and the batch processor
(``OTEL_BSP_*``) read their variables as the SDK defines them.

Trace contexts travel as W3C ``traceparent`` / ``tracestate`` (:mod:`consolidator.rules.tracecontext`);
a span links to at most :data:`MAX_LINKS` contexts (the SDK's default link limit), and the span
says how many it had (``consolidator.trace.contexts``).

A span started inside :func:`span_id_of` gets the span id given there instead of a random one
(the publish span of a batch takes the id its message's ``traceparent`` names); the tracer
installed by :func:`install` generates ids so.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
from collections.abc import Iterable, Iterator, Mapping

from consolidator.rules.errors import ConfigurationError
from consolidator.rules.tracecontext import (
    MAX_TRACESTATE_CHARS,
    TRACEPARENT_HEADER,
    TRACESTATE_HEADER,
    TraceContext,
    parse_traceparent,
)

MAX_LINKS = 128  # links per span at most: the SDK's default OTEL_SPAN_LINK_COUNT_LIMIT
EXPORTERS = ("otlp", "console", "none")

_tracer = None  # the SDK tracer while tracing is on
_provider = None
_forced_span_id: contextvars.ContextVar[int | None] = contextvars.ContextVar("consolidator_span_id", default=None)


class TracingConfigError(ConfigurationError):
    """An ``OTEL_*`` variable names something this product does not ship."""


def tracer():
    """The tracer while tracing is on, else None (the callers then create no span at all)."""
    return _tracer


def configure(service_name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Turn tracing on from the ``OTEL_*`` variables of ``environ`` (the process's by default),
    once per process; ``service_name`` is the ``service.name`` unless ``OTEL_SERVICE_NAME`` or
    ``OTEL_RESOURCE_ATTRIBUTES`` names one. Returns whether tracing is on. An exporter or an
    OTLP protocol this product does not ship raises :class:`TracingConfigError` naming it."""
    env = os.environ if environ is None else environ
    if _provider is not None:
        return True
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    unknown = [n for n in names if n not in EXPORTERS]
    if unknown:
        raise TracingConfigError(f"OTEL_TRACES_EXPORTER: {', '.join(unknown)} not available; use one of {EXPORTERS}")
    names = [n for n in names if n != "none"]
    if not names:
        return False
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    if "otlp" in names and protocol != "http/protobuf":
        raise TracingConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r} not available; use http/protobuf")
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )

    named = "OTEL_SERVICE_NAME" in env or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(resource=Resource.create({} if named else {SERVICE_NAME: service_name}))
    for name in names:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        else:  # console: one line per span, written as it ends
            exporter = ConsoleSpanExporter(out=sys.stderr, formatter=lambda span: span.to_json(indent=None) + "\n")
            provider.add_span_processor(SimpleSpanProcessor(exporter))
    install(provider)
    return True


def install(provider) -> None:
    """Trace with ``provider`` (an SDK ``TracerProvider``; tests pass one with an in-memory
    exporter), or turn tracing off (None)."""
    global _tracer, _provider
    _provider = provider
    if provider is not None and not getattr(provider.id_generator, "forces_span_ids", False):
        provider.id_generator = _forcing(provider.id_generator)
    _tracer = None if provider is None else provider.get_tracer("consolidator")


def _forcing(ids):
    """An SDK ``IdGenerator`` that gives the span id :func:`span_id_of` set, else what ``ids`` gives."""
    from opentelemetry.sdk.trace.id_generator import IdGenerator

    class ForcedSpanIds(IdGenerator):
        forces_span_ids = True

        def generate_span_id(self) -> int:
            forced = _forced_span_id.get()
            return ids.generate_span_id() if forced is None else forced

        def generate_trace_id(self) -> int:
            return ids.generate_trace_id()

        def is_trace_id_random(self) -> bool:
            return ids.is_trace_id_random()

    return ForcedSpanIds()


@contextlib.contextmanager
def span_id_of(traceparent: str | None) -> Iterator[None]:
    """Spans started inside get the span id of ``traceparent`` (a valid version-00 one; None:
    random ids as usual)."""
    token = _forced_span_id.set(None if traceparent is None else int(traceparent[36:52], 16))
    try:
        yield
    finally:
        _forced_span_id.reset(token)


def flush(timeout_ms: int = 5_000) -> None:
    """Export the ended spans now (a Lambda invocation ends with this: the sandbox may freeze)."""
    if _provider is not None:
        _provider.force_flush(timeout_ms)


_api: tuple | None = None  # what span_context builds with, once it has been imported


def _load_api() -> tuple:
    """The API's ``SpanContext``, ``TraceFlags`` and ``tracestate`` reader (imported at the first
    context, not at every one: an import statement costs as much as the rest of a span context)."""
    global _api
    from opentelemetry.trace import SpanContext, TraceFlags, TraceState

    _api = (SpanContext, TraceFlags, lambda state: TraceState.from_header([state]))
    return _api


def span_context(trace: TraceContext | None):
    """The remote ``SpanContext`` of ``trace`` (None when there is none). Only for a valid
    context (:func:`~consolidator.rules.tracecontext.trace_context` checked it).

    What the W3C propagator extracts from the context's headers: built straight from the fields
    when they are the version-00 form of a valid ``traceparent`` with a ``tracestate`` of at
    most :data:`~consolidator.rules.tracecontext.MAX_TRACESTATE_CHARS` (every context the
    ingest reads; the propagator's regular expression and context cost 20 times as much),
    extracted by the propagator otherwise."""
    if trace is None:
        return None
    parent, state = trace
    if parse_traceparent(parent) == parent and (not state or len(state) <= MAX_TRACESTATE_CHARS):
        new, flags, trace_state = _api or _load_api()
        return new(int(parent[3:35], 16), int(parent[36:52], 16), is_remote=True,
                   trace_flags=flags(int(parent[53:55], 16)), trace_state=trace_state(state) if state else None)
    from opentelemetry.trace import NonRecordingSpan, get_current_span
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {TRACEPARENT_HEADER: trace.traceparent}
    if trace.tracestate:
        carrier[TRACESTATE_HEADER] = trace.tracestate
    span = get_current_span(TraceContextTextMapPropagator().extract(carrier))
    return span.get_span_context() if isinstance(span, NonRecordingSpan) and span.get_span_context().is_valid else None


def parent_and_links(contexts: Iterable[TraceContext | None]):
    """The OpenTelemetry parent context (the first valid context: the trace this span joins)
    and the links (one per distinct context, at most :data:`MAX_LINKS`) of ``contexts``, and how
    many distinct contexts there were. Contexts are distinct by ``traceparent`` (the first one's
    ``tracestate`` counts); only the first :data:`MAX_LINKS` valid ones become span contexts,
    the others are only checked (whether one is valid depends on its ``traceparent`` alone)."""
    from opentelemetry.trace import Link, NonRecordingSpan, set_span_in_context

    distinct: dict[str, TraceContext] = {}
    for trace in contexts:
        if trace is not None and trace.traceparent not in distinct:
            distinct[trace.traceparent] = trace
    found: list = []
    more = 0  # valid contexts past the first MAX_LINKS
    for traceparent, trace in distinct.items():
        if len(found) < MAX_LINKS:
            if (context := span_context(trace)) is not None:
                found.append(context)
        elif parse_traceparent(traceparent) == traceparent or span_context(trace) is not None:
            more += 1
    parent = set_span_in_context(NonRecordingSpan(found[0])) if found else None
    return parent, [Link(c) for c in found], len(found) + more


def traceparent_of(span) -> str | None:
    """The W3C ``traceparent`` that continues ``span`` (what a published message carries)."""
    from opentelemetry.trace import set_span_in_context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=set_span_in_context(span))
    return parse_traceparent(carrier.get(TRACEPARENT_HEADER, ""))


def context_of(traceparent: str | None, tracestate: str | None = None):
    """The OpenTelemetry context a consumer of a message carrying ``traceparent`` continues;
    None (a new trace) when it carries none or a malformed one."""
    parent = parse_traceparent(traceparent) if traceparent else None
    found = span_context(TraceContext(parent, tracestate)) if parent else None
    if found is None:
        return None
    from opentelemetry.trace import NonRecordingSpan, set_span_in_context

    return set_span_in_context(NonRecordingSpan(found))


def flushed(handler):
    """A Lambda handler that exports its invocation's spans before it returns (or raises)."""
    import functools

    @functools.wraps(handler)
    def call(event, context):
        try:
            return handler(event, context)
        finally:
            flush()

    return call


def start_send_span(topic: str, operation: str):
    """While tracing is on, a started PRODUCER span ``send {topic}`` (a producer's, whose
    ``traceparent`` its messages carry: :func:`traceparent_of`); None while it is off."""
    if _tracer is None:
        return None
    from opentelemetry.trace import SpanKind

    return _tracer.start_span(f"send {topic}", kind=SpanKind.PRODUCER, attributes={
        "messaging.system": "kafka", "messaging.operation.type": "send", "messaging.operation.name": operation,
        "messaging.destination.name": topic})


def start_receive_span(topic: str, partition: int, offset: int, group: str, message_id: str,
                       traceparent: str | None):
    """While tracing is on, a started CONSUMER span ``process {topic}`` of one received message
    that continues the message's ``traceparent`` (a new trace without a valid one); None while
    it is off. What a downstream consumer of the batches does."""
    if _tracer is None:
        return None
    from opentelemetry.trace import SpanKind

    return _tracer.start_span(f"process {topic}", context=context_of(traceparent), kind=SpanKind.CONSUMER,
                              attributes={
                                  "messaging.system": "kafka", "messaging.operation.type": "process",
                                  "messaging.destination.name": topic,
                                  "messaging.destination.partition.id": str(partition),
                                  "messaging.kafka.offset": offset, "messaging.consumer.group.name": group,
                                  "messaging.message.id": message_id})
