"""The value format of the source topic and its schema registry (:mod:`consolidator.sources.formats`):
the settings and the one rule between a format and the Glue registry."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from consolidator.settings.base import ENV_PREFIX, Root, Seconds
from consolidator.settings.urls import SecretArn


def check_glue_format(value_format: str, name: str) -> None:
    """The one rule between a value format and the Glue registry, for the function's settings and
    the CDK environment files: Glue keeps Protobuf schemas as .proto text, which only a compiler
    reads, so Protobuf with Glue is decoded by the event source mapping, not the function."""
    if value_format == "protobuf":
        raise ValueError(f"{name}: Protobuf with the Glue registry cannot be decoded in the function (Glue keeps"
                         " .proto text, which needs a compiler): decode it in the event source mapping"
                         " (README: value formats)")


#: Subjects named in SCHEMA_SUBJECTS: more is a mistake (a topic's values name one or a few).
MAX_SUBJECTS = 100
Subject = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]+$")]


class _Format(Root):
    """The value format of the source topic and its schema registry (consolidator.sources.formats)."""

    value_format: Literal["json", "avro", "protobuf", "json-schema"] = Field(
        "json", description="json: plain JSON values; avro, protobuf, json-schema: values in a schema registry's"
        " wire format, decoded with their schema from SCHEMA_REGISTRY_URL or GLUE_REGISTRY_NAME")
    schema_registry_url: str | None = Field(
        None, pattern=r"^https?://[^\s@/]+(/\S*)?$", max_length=2048,
        description="Confluent-compatible schema registry (no credentials in the URL: see SCHEMA_REGISTRY_SECRET_ARN;"
        " https:// when that is set)")
    schema_registry_secret_arn: SecretArn | None = Field(
        None, description='Secrets Manager secret {"username": ..., "password": ...} of SCHEMA_REGISTRY_URL'
        " (Confluent Cloud: the API key and its secret)")
    glue_registry_name: str | None = Field(
        None, min_length=1, max_length=255, pattern=r"^[A-Za-z0-9_$#.-]+$",
        description="AWS Glue Schema Registry name (values in Glue's wire format); instead of SCHEMA_REGISTRY_URL")
    schema_registry_timeout_seconds: Seconds = Field(
        5, le=60, description="The deadline of one schema lookup as a whole (connecting, TLS, each request, every read"
        " of the answer), once per schema id")
    schema_subjects: list[Subject] | None = Field(
        None, min_length=1, max_length=MAX_SUBJECTS,
        description='JSON list of the subjects (Glue: schema names) whose schemas values may name, e.g.'
        ' ["orders-value"]; a schema id registered under none of them is poison (unknown_schema). Unset: the'
        " record's topic's <topic>-value (Confluent's TopicNameStrategy) or <topic> (Glue's default schema name)")
    schema_registry_max_lookups: int = Field(
        10, ge=1, le=1000, description="Schema lookups (ids not cached yet) one ingest invocation may make; records"
        " that need more wait for the next invocation. A topic names a handful of schema versions: 10 warm a new"
        " function in one invocation, and 2,000 random ids cost 10 calls, not 2,000")

    @model_validator(mode="after")
    def _one_schema_source(self) -> Self:
        url, secret, glue, subjects = (f"{ENV_PREFIX}{name}" for name in (
            "SCHEMA_REGISTRY_URL", "SCHEMA_REGISTRY_SECRET_ARN", "GLUE_REGISTRY_NAME", "SCHEMA_SUBJECTS"))
        given = [name for name, value in ((url, self.schema_registry_url), (glue, self.glue_registry_name),
                                          (secret, self.schema_registry_secret_arn),
                                          (subjects, self.schema_subjects)) if value]
        if self.value_format == "json":
            if given:
                raise ValueError(f"{', '.join(given)}: VALUE_FORMAT json reads no schema registry; unset it or"
                                 " choose avro, protobuf or json-schema")
            return self
        if bool(self.schema_registry_url) == bool(self.glue_registry_name):
            raise ValueError(f"{url}, {glue}: VALUE_FORMAT {self.value_format} needs exactly one of them")
        if self.glue_registry_name and self.schema_registry_secret_arn:
            raise ValueError(f"{secret}: it is for {url}; the Glue registry uses the function's IAM role")
        if self.schema_registry_secret_arn and not self.schema_registry_url.lower().startswith("https://"):
            raise ValueError(f"{url}: with {secret} set it must be https:// (over http:// the registry's credentials"
                             " would cross the network in cleartext)")
        if self.glue_registry_name:
            check_glue_format(self.value_format, glue)
        return self

    def value_format_spec(self):
        """The :class:`consolidator.sources.formats.ValueFormat` of these settings; None for JSON."""
        from consolidator.sources.formats import value_format_of

        return value_format_of(self)

    def value_decoder(self):
        """A :class:`consolidator.sources.formats.ValueDecoder` of these settings (reads the registry's
        secret now); None for JSON."""
        spec = self.value_format_spec()
        return None if spec is None else spec.decoder()
