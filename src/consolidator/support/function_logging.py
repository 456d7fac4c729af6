"""Logging of the Lambda functions, set up in one place: every handler calls
:func:`configure_function_logging` once, at import, with its Powertools logger.

Guarantee: whatever the function's level (``POWERTOOLS_LOG_LEVEL``, DEBUG in the dev
environment) and whatever the root logger's (Lambda's ``AWS_LAMBDA_LOG_LEVEL``), the AWS SDK
and HTTP client loggers stay at WARNING or above. At DEBUG, botocore logs every response body
(GetSecretValue's holds the database password and the Redis AUTH token) and urllib3 every
request; neither reaches the function's logs.
"""

from __future__ import annotations

import logging

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

# Libraries that log request or response contents at DEBUG or INFO: the AWS SDK, its HTTP
# stack, the OpenTelemetry SDK and exporter, the MSK IAM signer, the schema
# registry client's HTTP stack (httpx2, httpcore2, authlib).
SDK_LOGGERS = ("boto3", "botocore", "s3transfer", "urllib3", "requests", "opentelemetry",
               "aws_msk_iam_sasl_signer", "httpx", "httpcore", "httpx2", "httpcore2", "authlib")
SDK_FLOOR = logging.WARNING


def sdk_level(function_level: int) -> int:
    """The level of the SDK loggers for a function logging at ``function_level``."""
    return max(SDK_FLOOR, function_level)


def configure_function_logging(logger: Logger) -> None:
    """Give the project's loggers (``consolidator.*``) the function's level and JSON format;
    give the SDK loggers the same format, at :func:`sdk_level`. Loggers created later (an SDK
    imported on first use) inherit the level set here on their top-level logger."""
    level = logger.log_level
    # another function's own logger (``consolidator-ingest`` ...: the demo runs two functions in
    # one process) keeps its handler, so its lines keep its service name
    others = {name for name in logging.root.manager.loggerDict if name.startswith("consolidator-")} - {logger.name}
    copy_config_to_registered_loggers(source_logger=logger, exclude=set(SDK_LOGGERS) | others)
    floor = sdk_level(level)
    copy_config_to_registered_loggers(source_logger=logger, include=set(SDK_LOGGERS), log_level=floor)
    for name in SDK_LOGGERS:
        logging.getLogger(name).setLevel(floor)  # also when not imported yet
    for name, child in list(logging.root.manager.loggerDict.items()):
        top = name.partition(".")[0]
        if (top in SDK_LOGGERS and isinstance(child, logging.Logger)
                and child.level != logging.NOTSET and child.level < floor):
            child.setLevel(floor)  # a child someone set lower would log on its own level
