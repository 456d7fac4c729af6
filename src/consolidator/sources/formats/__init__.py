"""Event values in a schema-registry format (Avro, Protobuf, JSON Schema), in front of the JSON
event parsing.

With ``CONSOLIDATOR_VALUE_FORMAT=json`` (the default) nothing here runs. Otherwise each record's
value is decoded with its schema from a Confluent-compatible registry or the AWS Glue Schema
Registry into the JSON bytes of the same document, and :func:`consolidator.rules.events.decode`
validates that like any JSON value: the event, coalescing, the aggregation and the batch
message are those of the same document sent as JSON. The event size cap applies to the value
as received and to its decoded JSON. Failure classes: :mod:`consolidator.sources.formats.base`.
"""

from __future__ import annotations

from consolidator.rules.events import (
    READ,
    Event,
    FieldNames,
    KafkaRecord,
    PoisonEvent,
    PoisonReason,
    Trace,
    decode,
)
from consolidator.sources.formats.base import RegistryUnavailable, ValueDecoder
from consolidator.sources.formats.decoder import VALUE_FORMATS, RegistryValueDecoder, ValueFormat
from consolidator.sources.formats.limits import REGISTRY_SHARE_OF_FUNCTION_TIMEOUT

__all__ = ["VALUE_FORMATS", "RegistryUnavailable", "RegistryValueDecoder", "ValueDecoder", "ValueFormat",
           "decode_event", "value_format_of"]


def decode_event(values: ValueDecoder | None, record: KafkaRecord, names: FieldNames, max_event_bytes: int,
                 trace: Trace = READ) -> Event:
    """The event of ``record`` whose value is in ``values``' format (None: JSON). Raises
    :class:`PoisonEvent` for bad input and :class:`RegistryUnavailable` when the registry
    cannot answer; the record itself is unchanged (a dead letter keeps the value as received).
    ``trace``: as :func:`~consolidator.rules.events.decode` takes it."""
    value = record.value
    if values is None or not value:
        return decode(record, names, max_event_bytes, trace)
    if len(value) > max_event_bytes:
        raise PoisonEvent(PoisonReason.TOO_LARGE, f"value is {len(value)} bytes, limit is {max_event_bytes}")
    return decode(record._replace(value=values.to_json(value, record.topic)), names, max_event_bytes, trace)



def value_format_of(settings) -> ValueFormat | None:
    """The value format the settings (``_Format`` of :mod:`consolidator.settings`) describe;
    None for JSON. Lookups are counted per invocation where there is one (ingest: the settings
    have the function's timeout field), and they may take
    :data:`~consolidator.sources.formats.limits.REGISTRY_SHARE_OF_FUNCTION_TIMEOUT` of a known timeout."""
    if settings.value_format == "json":
        return None
    invocation = hasattr(settings, "function_timeout_seconds")
    function_timeout = getattr(settings, "function_timeout_seconds", None)
    return ValueFormat(settings.value_format, settings.schema_registry_url, settings.schema_registry_secret_arn,
                       settings.glue_registry_name, settings.schema_registry_timeout_seconds, settings.max_event_bytes,
                       subjects=tuple(settings.schema_subjects or ()),
                       max_lookups=settings.schema_registry_max_lookups if invocation else None,
                       lookup_seconds=None if function_timeout is None
                       else function_timeout * REGISTRY_SHARE_OF_FUNCTION_TIMEOUT)
