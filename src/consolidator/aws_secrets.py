"""Secrets Manager reads, done once when a service is built (never at import time)."""

from __future__ import annotations


def secret_string(secret_arn: str) -> str:
    import boto3

    return boto3.client("secretsmanager").get_secret_value(SecretId=secret_arn)["SecretString"]
