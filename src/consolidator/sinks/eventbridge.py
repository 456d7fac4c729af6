"""EventBridge sink: one event per batch on a bus; ``detail`` is the batch message."""

from __future__ import annotations

from collections.abc import Sequence

from consolidator.sinks import OutgoingBatch

MAX_ENTRIES = 10  # PutEvents limit per call


class EventBridgeSink:
    def __init__(self, event_bus: str, *, source: str = "consolidator",
                 detail_type: str = "ConsolidatedBatch", client=None) -> None:
        import boto3

        self.event_bus = event_bus
        self.source = source
        self.detail_type = detail_type
        self._client = client or boto3.client("events")

    def publish(self, batches: Sequence[OutgoingBatch]) -> dict[int, str]:
        from botocore.exceptions import BotoCoreError, ClientError

        errors: dict[int, str] = {}
        for start in range(0, len(batches), MAX_ENTRIES):
            chunk = list(range(start, min(start + MAX_ENTRIES, len(batches))))
            entries = [
                {
                    "Source": self.source,
                    "DetailType": self.detail_type,
                    "Detail": batches[i].body.decode(),
                    "EventBusName": self.event_bus,
                }
                for i in chunk
            ]
            try:
                response = self._client.put_events(Entries=entries)
            except (BotoCoreError, ClientError) as exc:
                errors.update({i: f"eventbridge put failed: {exc}" for i in chunk})
                continue
            results = response.get("Entries", [])
            for position, i in enumerate(chunk):
                result = results[position] if position < len(results) else {}
                if result.get("ErrorCode") or not result.get("EventId"):
                    errors[i] = f"eventbridge rejected: {result.get('ErrorCode')} {result.get('ErrorMessage', '')}"
        return errors

    def close(self) -> None:
        pass
