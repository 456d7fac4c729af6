"""The AWS Glue Schema Registry: a schema version by its id (the UUID in the value's frame).

``GetSchemaVersion`` is called once per schema version id (:class:`SchemaCache` in front of it).
A version the registry does not have, or one that belongs to another registry than the
configured one, is an unknown schema: poison. Throttling, service errors, access denied and
network errors mean the registry cannot answer now: :class:`RegistryUnavailable`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from consolidator.rules.events import PoisonReason
from consolidator.sources.formats.base import RegisteredSchema, RegistryUnavailable, poison

NOT_FOUND = ("EntityNotFoundException", "InvalidInputException")


@dataclass
class GlueRegistry:
    """Schema versions of the Glue registry ``registry_name`` (in the function's region)."""

    registry_name: str
    timeout_s: float = 5.0
    client: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.client is None:
            import boto3
            from botocore.config import Config

            self.client = boto3.client("glue", config=Config(
                connect_timeout=self.timeout_s, read_timeout=self.timeout_s, retries={"max_attempts": 2}))

    def schema(self, schema_id: str, protobuf: bool) -> RegisteredSchema:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            found = self.client.get_schema_version(SchemaVersionId=schema_id)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in NOT_FOUND:
                raise poison(PoisonReason.UNKNOWN_SCHEMA, f"the Glue registry does not know this schema version"
                             f" ({code})", schema_id) from None
            raise RegistryUnavailable(f"Glue Schema Registry failed for schema version {schema_id}: {code}") from exc
        except BotoCoreError as exc:
            raise RegistryUnavailable(f"Glue Schema Registry cannot be reached for schema version {schema_id}:"
                                      f" {type(exc).__name__}") from exc
        # arn:aws:glue:<region>:<account>:schema/<registry>/<schema>
        registry = found.get("SchemaArn", "").split(":", 5)[-1].split("/")[1:2]
        if registry != [self.registry_name]:
            raise poison(PoisonReason.UNKNOWN_SCHEMA, f"the schema version is in registry {registry[:1]},"
                         f" not in {self.registry_name!r}", schema_id)
        return RegisteredSchema(found["DataFormat"], found["SchemaDefinition"])
