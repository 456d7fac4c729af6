"""The AWS Glue Schema Registry: a schema version by its id (the UUID in the value's frame).

``GetSchemaVersion`` is called once per schema version id (:class:`SchemaCache` in front of it).
A version the registry does not have, one that belongs to another registry than the configured
one, or to a schema whose name is not allowed (the subjects: by default the topic's name, which
Glue's serializers name the schema after), is an unknown schema: poison. Throttling, service
errors, access denied and network errors mean the registry cannot answer now:
:class:`RegistryUnavailable`. The lookup is bounded by botocore's connect and read timeouts
(``timeout_s``) and two attempts: an AWS endpoint, not a server producers reach.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from consolidator.rules.events import PoisonReason
from consolidator.sources.formats.base import RegisteredSchema, RegistryUnavailable, poison, shown

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

    def schema(self, schema_id: str, protobuf: bool, subjects: frozenset[str], timeout_s: float) -> RegisteredSchema:
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
        registry, name = ([*found.get("SchemaArn", "").split(":", 5)[-1].split("/")[1:3], "", ""])[:2]
        if registry != self.registry_name:
            raise poison(PoisonReason.UNKNOWN_SCHEMA, f"the schema version is in registry {registry[:100]!r},"
                         f" not in {self.registry_name!r}", schema_id)
        if name not in subjects:
            raise poison(PoisonReason.UNKNOWN_SCHEMA, f"the schema version belongs to schema {name[:100]!r}, none of"
                         f" the allowed {shown(subjects)} (SCHEMA_SUBJECTS)", schema_id)
        definition, data_format = found.get("SchemaDefinition"), found.get("DataFormat")
        if not isinstance(definition, str) or not isinstance(data_format, str):
            raise poison(PoisonReason.UNKNOWN_SCHEMA, "the Glue answer holds no schema definition", schema_id)
        return RegisteredSchema(data_format, definition)
