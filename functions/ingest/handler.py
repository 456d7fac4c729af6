"""MSK-triggered ingest Lambda: records -> buffer, partial batch failures for offset safety."""

from functools import cache

from aws_lambda_powertools import Logger, Metrics

from consolidator.services.ingest import IngestService, build_ingest_service
from consolidator.settings import IngestSettings, load_settings
from consolidator.support import tracing
from consolidator.support.function_logging import configure_function_logging

logger = Logger(service="consolidator-ingest")
metrics = Metrics(namespace="Consolidator", service="ingest")
tracing.configure("consolidator-ingest")  # OTEL_* variables; off unless OTEL_TRACES_EXPORTER is set
configure_function_logging(logger)  # the SDK's loggers stay at WARNING or above


@cache
def service() -> IngestService:
    """Built on the first invocation (settings validated then), reused while the container lives."""
    settings = load_settings(IngestSettings)
    metrics.set_default_dimensions(environment=settings.environment)  # the alarms select on it
    return build_ingest_service(settings, metrics)


@logger.inject_lambda_context
@tracing.flushed
@metrics.log_metrics
def handler(event: dict, context) -> dict:
    return service().handle_msk_event(event)
