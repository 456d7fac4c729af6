"""The MSK event source mapping's shapes: the event Lambda receives and the partial batch response."""

from __future__ import annotations

import base64
from collections.abc import Iterable

from consolidator.events import KafkaRecord, SourcePosition


def _b64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def records_from_event(event: dict) -> list[KafkaRecord]:
    """Kafka records of an MSK (or self-managed Kafka) event, in the order Lambda gave them."""
    if event.get("eventSource") not in ("aws:kafka", "SelfManagedKafka"):
        raise ValueError(f"not a Kafka event source: {event.get('eventSource')!r}")
    records = []
    for batch in event.get("records", {}).values():
        for r in batch:
            headers = tuple(
                (name, bytes(value)) for header in r.get("headers") or () for name, value in header.items()
            )
            records.append(
                KafkaRecord(
                    topic=r["topic"],
                    partition=int(r["partition"]),
                    offset=int(r["offset"]),
                    timestamp_ms=int(r["timestamp"]),
                    key=_b64(r.get("key")),
                    value=_b64(r.get("value")),
                    headers=headers,
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
