"""Scheduled cleanup Lambda: monthly partitions ready ahead, fully sent old ones dropped."""

from functools import cache

from aws_lambda_powertools import Logger, Metrics

from consolidator.services.cleanup import CleanupService, build_cleanup_service
from consolidator.settings import CleanupSettings, load_settings
from consolidator.support import tracing
from consolidator.support.function_logging import configure_function_logging

logger = Logger(service="consolidator-cleanup")
metrics = Metrics(namespace="Consolidator", service="cleanup")
tracing.configure("consolidator-cleanup")  # OTEL_* variables; off unless OTEL_TRACES_EXPORTER is set
configure_function_logging(logger)  # the SDK's loggers stay at WARNING or above


@cache
def service() -> CleanupService:
    """Built on the first invocation (settings validated then), reused while the container lives."""
    settings = load_settings(CleanupSettings)
    metrics.set_default_dimensions(environment=settings.environment)  # the alarms select on it
    return build_cleanup_service(settings, metrics)


@logger.inject_lambda_context
@tracing.flushed
@metrics.log_metrics
def handler(event: dict, context) -> dict:
    report = service().run()
    logger.info("cleanup finished", extra={"report": report.as_dict()})
    return report.as_dict()
