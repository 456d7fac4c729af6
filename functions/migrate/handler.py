"""Deploy-time migration Lambda (run by a CDK trigger): applies pending schema migrations, then
creates or updates each function's own database user (``CONSOLIDATOR_DATABASE_USERS``).

Idempotent: migrations already applied are skipped and users already right stay as they are,
so re-running on every deploy is safe. An error fails the invocation, and the trigger fails
the deployment. This is the only function that connects as the cluster's master user.
"""

from functools import cache

from aws_lambda_powertools import Logger

from consolidator.rules.clock import SystemClock
from consolidator.services.migrate import build_migration
from consolidator.settings import MigrateSettings, load_settings
from consolidator.support.function_logging import configure_function_logging

logger = Logger(service="consolidator-migrate")
configure_function_logging(logger)  # the SDK's loggers stay at WARNING or above


@cache
def migration():
    return build_migration(load_settings(MigrateSettings))


@logger.inject_lambda_context
def handler(event: dict, context) -> dict:
    report = migration()(SystemClock())
    logger.info("schema migrated, database users ensured", extra=report.as_dict())
    return report.as_dict()
