"""EventBridge sink: one event per batch on a bus; ``detail`` is the batch message.

PutEvents limits (AWS "Calculating PutEvents event entry size"): at most 10 entries per call,
and the entries' total size, counted as the UTF-8 bytes of ``Source``, ``DetailType`` and
``Detail``, must stay under 256 KB. Requests are chunked by count and by size; a batch whose
entry alone is over the limit is reported failed without being sent.

A body is measured as it is sent: ``Detail`` is the encoded message itself, so its UTF-8 bytes
(``measure_body`` is ``len``; the JSON encoder has already escaped quotes, backslashes and
control characters, and writes every other character as UTF-8).

An entry carries the batch's context (:class:`~consolidator.sinks.OutgoingBatch`) as its
``TraceHeader`` (the X-Ray form of the W3C ``traceparent``, :func:`xray_header`): EventBridge passes
it on to the X-Ray traces of its targets, not into the event a target receives; a target reads
the batch's ``traceparent`` in the detail (the message's own field, when a member had a context).
"""

from __future__ import annotations

from collections.abc import Sequence

from consolidator.sinks import DEFAULT_TIMEOUT_S, OutgoingBatch, aws_client_config, chunk_by_size

MAX_ENTRIES = 10  # PutEvents entries per call
MAX_REQUEST_BYTES = 256 * 1024  # all entries of one PutEvents call together, and one entry


def xray_header(traceparent: str) -> str:
    """The X-Ray trace header of a version-00 W3C ``traceparent`` (X-Ray reads a W3C trace id
    as ``1-<first 8 hex>-<last 24 hex>``)."""
    _, trace_id, span_id, flags = traceparent.split("-")
    return f"Root=1-{trace_id[:8]}-{trace_id[8:]};Parent={span_id};Sampled={int(flags, 16) & 1}"


class EventBridgeSink:
    measure_body = staticmethod(len)  # ``Detail`` is the encoded message as it is
    messaging_system = "aws_eventbridge"  # the publish span's messaging.system

    def __init__(self, event_bus: str, *, source: str = "consolidator",
                 detail_type: str = "ConsolidatedBatch", client=None,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        import boto3

        self.event_bus = self.destination = event_bus
        self.source = source
        self.detail_type = detail_type
        self._overhead = len(source.encode()) + len(detail_type.encode())
        self.max_message_bytes = MAX_REQUEST_BYTES - self._overhead  # the largest ``Detail``
        self._client = client or boto3.client("events", config=aws_client_config(timeout_s))

    def entry_bytes(self, batch: OutgoingBatch) -> int:
        """The entry's size as EventBridge counts it (no Time, no Resources)."""
        return self._overhead + self.measure_body(batch.body)

    def publish(self, batches: Sequence[OutgoingBatch]) -> dict[int, str]:
        from botocore.exceptions import BotoCoreError, ClientError

        errors: dict[int, str] = {}
        sizes = [self.entry_bytes(b) for b in batches]
        for i, size in enumerate(sizes):
            if size > MAX_REQUEST_BYTES:
                errors[i] = f"eventbridge entry of {size} bytes is over the {MAX_REQUEST_BYTES}-byte limit"
        sendable = [i for i in range(len(batches)) if i not in errors]
        for chunk in chunk_by_size(sendable, sizes, MAX_ENTRIES, MAX_REQUEST_BYTES):
            entries = [
                {
                    "Source": self.source,
                    "DetailType": self.detail_type,
                    "Detail": batches[i].body.decode(),  # the bytes measure_body counted
                    "EventBusName": self.event_bus,
                    **({} if batches[i].traceparent is None else {"TraceHeader": xray_header(batches[i].traceparent)}),
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
