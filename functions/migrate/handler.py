"""Deploy-time migration Lambda (run by a CDK trigger): applies pending schema migrations.

Idempotent: migrations already applied are skipped, so re-running on every deploy is safe.
An error fails the invocation, and the trigger fails the deployment.
"""

from functools import cache

from aws_lambda_powertools import Logger

from consolidator.clock import SystemClock
from consolidator.function_logging import configure_function_logging
from consolidator.settings import CleanupSettings, load_settings
from consolidator.store import open_store
from consolidator.store.mysql import MySQLStore

logger = Logger(service="consolidator-migrate")
configure_function_logging(logger)  # the SDK's loggers stay at WARNING or above


@cache
def store() -> MySQLStore:
    settings = load_settings(CleanupSettings)
    return open_store(settings.database_url, settings.database_secret_arn)


@logger.inject_lambda_context
def handler(event: dict, context) -> dict:
    applied = store().migrate(SystemClock().now_ms())
    logger.info("schema migrated", extra={"applied": applied})
    return {"applied": applied}
