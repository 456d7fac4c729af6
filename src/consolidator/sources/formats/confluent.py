"""A Confluent-compatible schema registry (Confluent Platform or Cloud, Redpanda, Apicurio's
ccompat API, Karapace), through confluent-kafka's ``SchemaRegistryClient``.

Only ``GET /schemas/ids/{id}`` is called, once per schema id (:class:`SchemaCache` in front of it;
the client caches too). A 404 is an id the registry does not know: poison. Anything else that
goes wrong (no connection, a timeout, 429, 5xx, 401/403) means the registry cannot answer now:
:class:`RegistryUnavailable`, and the record is retried. The credentials are read from the
secret once, handed to the client and never logged or put in a message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from consolidator.rules.errors import ConfigurationError
from consolidator.rules.events import PoisonReason
from consolidator.sources.formats.base import RegisteredSchema, RegistryUnavailable, poison
from consolidator.support.redact import masked

NOT_FOUND = 404


def credentials_from_secret(text: str) -> str:
    """``user:password`` from a secret string: JSON ``{"username": ..., "password": ...}`` (for
    Confluent Cloud, the API key and its secret). The message of a bad secret names no value."""
    try:
        document = json.loads(text)
        user, password = document["username"], document["password"]
    except (ValueError, TypeError, KeyError):
        raise ConfigurationError('the schema registry secret must be JSON {"username": ..., "password": ...}') from None
    if not (isinstance(user, str) and isinstance(password, str) and user and ":" not in user):
        raise ConfigurationError("the schema registry secret's username and password must be strings (no ':' in"
                                 " the username)")
    return f"{user}:{password}"


@dataclass
class ConfluentRegistry:
    """Schemas by id from a Confluent-compatible registry at ``url``."""

    url: str
    credentials: str | None = field(default=None, repr=False)  # user:password, from the secret; never shown
    timeout_s: float = 5.0

    def __post_init__(self) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        conf: dict[str, object] = {"url": self.url, "timeout": self.timeout_s, "max.retries": 1,
                                   "retries.wait.ms": 100, "retries.max.wait.ms": 500}
        if self.credentials is not None:
            conf["basic.auth.user.info"] = self.credentials
        self._client = SchemaRegistryClient(conf)

    def schema(self, schema_id: str, protobuf: bool) -> RegisteredSchema:
        """The schema ``schema_id`` (Protobuf: as a serialized FileDescriptorProto)."""
        from confluent_kafka.schema_registry.common._httpx_compat import httpx
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            found = self._client.get_schema(int(schema_id), fmt="serialized" if protobuf else None)
        except SchemaRegistryError as exc:
            if exc.http_status_code == NOT_FOUND:
                raise poison(PoisonReason.UNKNOWN_SCHEMA, f"the registry does not know this schema id"
                             f" ({exc.error_code}: {exc.error_message})", schema_id) from None
            raise RegistryUnavailable(f"schema registry {masked(self.url)} answered {exc.http_status_code}"
                                      f" for schema {schema_id}: {exc.error_message}") from None
        except (httpx.HTTPError, OSError, ValueError) as exc:  # transport errors, a body that is not JSON
            raise RegistryUnavailable(f"schema registry {masked(self.url)} cannot be reached for schema"
                                      f" {schema_id}: {type(exc).__name__}: {masked(str(exc))}") from exc
        return RegisteredSchema(found.schema_type or "AVRO", found.schema_str)
