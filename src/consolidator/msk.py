"""The MSK event source mapping's shapes: the event Lambda receives and the partial batch response."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable

from consolidator.events import KafkaRecord, SourcePosition


def _b64(text: str | None) -> bytes | None:
    return None if text is None else binascii.a2b_base64(text)


def records_from_event(event: dict) -> list[KafkaRecord]:
    """Kafka records of an MSK (or self-managed Kafka) event, in the order Lambda gave them."""
    if event.get("eventSource") not in ("aws:kafka", "SelfManagedKafka"):
        raise ValueError(f"not a Kafka event source: {event.get('eventSource')!r}")
    records = []
    for batch in event.get("records", {}).values():
        for r in batch:
            headers = r.get("headers")
            records.append(
                KafkaRecord(
                    r["topic"], int(r["partition"]), int(r["offset"]), int(r["timestamp"]),
                    _b64(r.get("key")), _b64(r.get("value")),
                    tuple((name, bytes(value)) for header in headers for name, value in header.items())
                    if headers else (),
                )
            )
    return records


def batch_item_failures(failed: Iterable[SourcePosition]) -> dict:
    """Partial batch response: Lambda re-reads each listed partition from its lowest failed offset."""
    return {
        "batchItemFailures": [
            {"itemIdentifier": {"partition": f"{p.topic}-{p.partition}", "offset": p.offset}}
            for p in sorted(set(failed))
        ]
    }


def event_from_records(records: Iterable[KafkaRecord], source_arn: str = "") -> dict:
    """The MSK event Lambda would send for ``records`` (tests, the demo's event-source emulator)."""
    grouped: dict[str, list[dict]] = {}
    for r in records:
        grouped.setdefault(f"{r.topic}-{r.partition}", []).append(
            {
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "timestamp": r.timestamp_ms,
                "timestampType": "CREATE_TIME",
                "key": None if r.key is None else base64.b64encode(r.key).decode(),
                "value": None if r.value is None else base64.b64encode(r.value).decode(),
                "headers": [{name: list(value)} for name, value in r.headers],
            }
        )
    return {"eventSource": "aws:kafka", "eventSourceArn": source_arn, "records": grouped}
