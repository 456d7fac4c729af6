"""Scheduled flush Lambda: ticks every tick_interval while the invocation's time allows."""

from functools import cache

from aws_lambda_powertools import Logger, Metrics

from consolidator.services.flush import FlushService
from consolidator.services.flush_setup import build_flush_service
from consolidator.settings import FlushSettings, load_settings
from consolidator.support import tracing
from consolidator.support.function_logging import configure_function_logging

logger = Logger(service="consolidator-flush")
metrics = Metrics(namespace="Consolidator", service="flush")
tracing.configure("consolidator-flush")  # OTEL_* variables; off unless OTEL_TRACES_EXPORTER is set
configure_function_logging(logger)  # the SDK's loggers stay at WARNING or above


@cache
def service() -> FlushService:
    """Built on the first invocation (settings validated then), reused while the container lives."""
    settings = load_settings(FlushSettings)
    metrics.set_default_dimensions(environment=settings.environment)  # the alarms select on it
    return build_flush_service(settings, metrics)


@logger.inject_lambda_context
@tracing.flushed
@metrics.log_metrics
def handler(event: dict, context) -> dict:
    reports = service().run(context.get_remaining_time_in_millis)
    return {
        "ticks": len(reports),
        "skipped": sum(1 for r in reports if r.skipped),
        "published": sum(len(r.published) for r in reports),
        "dead": sum(r.dead for r in reports),
        "publish_failures": sum(r.publish_failures for r in reports),
        "build_failures": sum(r.build_failures for r in reports),
    }
