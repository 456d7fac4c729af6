"""Where the data lives and goes: the database (and the deployment's name and the function's
timeout every runtime shares), the dead-letter destination and the sink of batches, and the one
rule of how long a publish may wait for its sink."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from consolidator.settings.base import Root, Seconds, reaches
from consolidator.settings.loading import NO_DATABASE
from consolidator.settings.urls import DatabaseUrl, DeadLetterUrl, SecretArn, SinkUrl

SINK_TIMEOUT_MAX_SECONDS = 10.0


def sink_timeout_seconds(function_timeout_seconds: float | None) -> float:
    """How long one publish may wait for its sink: the one rule for every sink of every function.
    A third of the function's timeout, at most 10 s (10 s outside Lambda), so a slow destination
    fails its messages, never the invocation that still has to record the outcome."""
    if function_timeout_seconds is None:
        return SINK_TIMEOUT_MAX_SECONDS
    return min(SINK_TIMEOUT_MAX_SECONDS, function_timeout_seconds / 3)


class _Base(Root):
    database_url: DatabaseUrl | None = Field(
        None, repr=False,
        description="mysql://user:password@host:3306/db; ?ssl=true (or 1, required) for TLS verified against the"
        " shipped RDS CA bundle, ?ssl_ca=/path/ca.pem for TLS verified against that CA, ?ssl=false (or 0, the"
        " default) for none; no other option. Without a user name and with DATABASE_SECRET_ARN set, the user and"
        " password come from the secret")
    database_secret_arn: SecretArn | None = Field(
        None, description="Secrets Manager secret in RDS format, used when DATABASE_URL is unset (TLS on, verified"
        " against the RDS CA bundle) or has no user name; re-read when the database rejects its password")

    function_timeout_seconds: Seconds | None = Field(
        None, le=900, description="The Lambda function's timeout (the stack sets it); every sink waits at most a"
        " third of it, 10 s at most (10 s when unset)")

    environment: str = Field(
        "local", pattern=r"^[a-z][a-z0-9-]{0,20}$",
        description="Deployment name (dev, staging, prod); every metric carries it as the environment dimension",
    )

    @model_validator(mode="after")
    def _one_database_source(self) -> Self:
        if not (self.database_url or self.database_secret_arn):
            raise ValueError(NO_DATABASE)
        return self

    @property
    def sink_timeout_seconds(self) -> float:
        return sink_timeout_seconds(self.function_timeout_seconds)


class _DeadLetter(Root):
    dead_letter_url: DeadLetterUrl = Field(
        repr=False, description="Where poison and expired rows go: sqs://sqs.<region>.amazonaws.com/<account>/<queue>"
        " or file:///path.jsonl", json_schema_extra=reaches(spark=("stream",)))


class _Sink(Root):
    sink_url: SinkUrl = Field(
        repr=False, description="Where batches go: kafka://, sqs://, events:// or file:// (docs/flush.md, Sinks)",
        json_schema_extra=reaches(spark=("stream",)))
    max_batch_bytes: int | None = Field(
        None, gt=0, le=100_000_000,
        description="Cap on one encoded batch message (unset: the sink's per-message limit, which it must not"
                    " exceed); a due claim is split into batches under it",
        json_schema_extra=reaches(spark=("stream",)),
    )
