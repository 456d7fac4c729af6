"""Secrets Manager reads, done once when a service is built (never at import time).

A secret's value is returned to the caller and nowhere else: this module logs nothing, and the
AWS SDK's own loggers, which log response bodies at DEBUG, are kept at WARNING or above in the
functions (:mod:`consolidator.support.function_logging`)."""

from __future__ import annotations


def secret_region(secret_arn: str) -> str | None:
    """The region named by ``arn:aws:secretsmanager:<region>:...``; None for a bare name."""
    parts = secret_arn.split(":")
    return parts[3] or None if len(parts) > 3 and parts[0] == "arn" else None


def secret_string(secret_arn: str) -> str:
    """The secret's string, read in the secret's own region (a Spark executor may have none
    configured)."""
    import boto3

    client = boto3.client("secretsmanager", region_name=secret_region(secret_arn))
    return client.get_secret_value(SecretId=secret_arn)["SecretString"]
