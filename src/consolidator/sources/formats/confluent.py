"""A Confluent-compatible schema registry (Confluent Platform or Cloud, Redpanda, Apicurio's
ccompat API, Karapace), read over its REST API with
:mod:`consolidator.sources.formats.bounded_http`.

One lookup is two ``GET``\\s under one deadline: ``/schemas/ids/{id}/versions`` (the subjects the
id is registered under, soft-deleted versions included: old records still name them), and only
if one of them is allowed, ``/schemas/ids/{id}`` (Protobuf: ``?format=serialized``). Every answer
is one of:

- the schema: a 200 whose JSON body has the expected shape;
- poison for the records naming the id (``unknown_schema``, with the reason): the registry's
  API answering about the id (a JSON body) with 404 and error code 40403 (unknown id), 400 or
  422 (it refuses the request) or any other 4xx but 401, 403, 408 and 429; a subject list
  without an allowed subject; a 200 whose JSON is not the expected shape (``[]``, ``null``,
  ``{"references": "x"}``); an answer over
  :data:`~consolidator.sources.formats.limits.MAX_SCHEMA_RESPONSE_BYTES`, as received or inflated;
- :class:`RegistryUnavailable` (retried): no connection, TLS failure, the deadline, 401 or 403
  (credentials refused), 408, 429, 5xx, a redirect (not followed), any other status, a 404
  without error code 40403 (no such route), a body that is not JSON (an empty one too) or is
  cut short: the registry is not answering, or it is not its API that answers (a proxy's error
  page, a wrong URL path).

The credentials are read from the secret once, sent as basic auth (the settings refuse them
over plain http), and never logged or put in a message.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from typing import Any

from consolidator.rules.errors import ConfigurationError
from consolidator.rules.events import PoisonReason
from consolidator.sources.formats import bounded_http
from consolidator.sources.formats.base import RegisteredSchema, RegistryUnavailable, poison, shown
from consolidator.sources.formats.limits import MAX_SCHEMA_RESPONSE_BYTES
from consolidator.support.redact import masked

NOT_FOUND = 404
SCHEMA_NOT_FOUND = 40403  # the error code of a 404 that is about the id (another 404: no such route)
UNAVAILABLE_4XX = (401, 403, 408, 429)  # credentials refused, timed out, throttled: the registry, not the id
ACCEPT = "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json"


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
    max_bytes: int = MAX_SCHEMA_RESPONSE_BYTES

    def __post_init__(self) -> None:
        self._headers = {"Accept": ACCEPT, "User-Agent": "consolidator"}
        if self.credentials is not None:
            token = base64.b64encode(self.credentials.encode()).decode("ascii")
            self._headers["Authorization"] = f"Basic {token}"
        self._tls = bounded_http.tls_context() if self.url.startswith("https:") else None

    def __repr__(self) -> str:
        return f"ConfluentRegistry(url={masked(self.url)!r})"

    def schema(self, schema_id: str, protobuf: bool, subjects: frozenset[str], timeout_s: float) -> RegisteredSchema:
        """The schema ``schema_id`` (Protobuf: a serialized FileDescriptorProto), when it is
        registered under one of ``subjects``."""
        deadline = time.monotonic() + timeout_s
        versions = self._get(f"/schemas/ids/{schema_id}/versions?deleted=true", schema_id, deadline)
        registered = _subjects(versions, schema_id)
        if not registered & subjects:
            raise poison(PoisonReason.UNKNOWN_SCHEMA, f"registered under {shown(registered)}, none of the allowed"
                         f" subjects {shown(subjects)} (SCHEMA_SUBJECTS)", schema_id)
        found = self._get(f"/schemas/ids/{schema_id}{'?format=serialized' if protobuf else ''}", schema_id, deadline)
        return _schema(found, schema_id)

    def _get(self, path: str, schema_id: str, deadline: float) -> Any:
        where = f"schema registry {masked(self.url)}"
        try:
            answer = bounded_http.get(self.url, path, headers=self._headers, deadline=deadline,
                                      max_bytes=self.max_bytes, context=self._tls)
        except bounded_http.TooLarge as exc:
            raise poison(PoisonReason.UNKNOWN_SCHEMA, f"{where} answered with more than the"
                         f" {self.max_bytes} bytes a schema may have ({exc})", schema_id) from None
        except bounded_http.Unreachable as exc:
            raise RegistryUnavailable(f"{where} gave no answer for schema {schema_id}: {masked(str(exc))}") from None
        try:
            body = json.loads(answer.body)
        except (ValueError, RecursionError):  # an empty body too
            body = _NOT_JSON
        status = answer.status
        if body is _NOT_JSON or status in UNAVAILABLE_4XX or not (status == 200 or 400 <= status < 500):
            what = "a redirect (not followed)" if 300 <= status < 400 else str(status)
            body_is = " with a body that is not JSON" if body is _NOT_JSON else ""
            raise RegistryUnavailable(f"{where} answered {what}{body_is} for schema {schema_id}{_error_message(body)}")
        if status == 200:
            return body
        if status == NOT_FOUND and not (isinstance(body, dict) and body.get("error_code") == SCHEMA_NOT_FOUND):
            raise RegistryUnavailable(f"{where} answered 404 without error code {SCHEMA_NOT_FOUND} (schema not found)"
                                      f" for schema {schema_id}{_error_message(body)}: is the URL the API's root?")
        reason = "does not know this schema id" if status == NOT_FOUND else "refused the lookup"
        raise poison(PoisonReason.UNKNOWN_SCHEMA, f"the registry {reason} ({status}{_error_message(body)})", schema_id)


_NOT_JSON = object()


def _error_message(body: Any) -> str:
    """``: <error_code> <message>`` of a registry error body, bounded; empty when it has none."""
    if not isinstance(body, dict):
        return ""
    parts = [str(body[key])[:200] for key in ("error_code", "message") if key in body]
    return f": {' '.join(parts)}" if parts else ""


def _not_a(what: str, body: Any, schema_id: str) -> Exception:
    return poison(PoisonReason.UNKNOWN_SCHEMA, f"the registry's answer is not {what}"
                  f" (got {type(body).__name__}: {json.dumps(body)[:120]})", schema_id)


def _subjects(body: Any, schema_id: str) -> frozenset[str]:
    """The subjects of a ``/schemas/ids/{id}/versions`` answer: a list of {"subject", "version"}."""
    what = 'a list of {"subject": ..., "version": ...}'
    if not isinstance(body, list) or not all(isinstance(item, dict) and isinstance(item.get("subject"), str)
                                             for item in body):
        raise _not_a(what, body, schema_id)
    return frozenset(item["subject"] for item in body)


def _schema(body: Any, schema_id: str) -> RegisteredSchema:
    """The schema of a ``/schemas/ids/{id}`` answer: {"schema": text, "schemaType"?: type,
    "references"?: [...]} (no type: Avro)."""
    what = 'a schema ({"schema": "<text>", "schemaType": ..., "references": [...]})'
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise _not_a(what, body, schema_id)
    schema_type = body.get("schemaType") or "AVRO"
    references = body.get("references", [])
    if not isinstance(schema_type, str) or not isinstance(references, list | None):
        raise _not_a(what, body, schema_id)
    return RegisteredSchema(schema_type, body["schema"])
