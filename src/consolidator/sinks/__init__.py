"""Where batches go: one small protocol, four destinations chosen by URL.

Guarantee of every sink: ``publish`` reports a batch as delivered only after the destination
confirmed it (Kafka ack from all in-sync replicas, SQS/EventBridge success entry, fsync'd
file line). Delivery is at least once: a batch may arrive more than once, always under the
same ``batch_id``, so consumers dedupe on it (see :mod:`consolidator.consumer.dedupe`).

Every sink waits at most ``timeout_s`` for one ``publish`` call's confirmations (Kafka: the
producer's flush and message timeout; SQS, EventBridge: connect and read timeouts of two
attempts). The functions derive it from their own timeout
(:func:`consolidator.settings.sink_timeout_seconds`), so a slow destination fails its
messages, not the invocation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import parse_qs, urlsplit

from consolidator.support.redact import masked


@dataclass(frozen=True, slots=True)
class OutgoingBatch:
    """One encoded batch message (``batch.encode``) with what sinks put in keys and headers."""

    batch_id: str
    group_key: str
    body: bytes
    # the batch's W3C context: its message's ``traceparent`` when a member had a trace context, else
    # (tracing on) the publish span's; a Kafka header, an SQS message attribute, EventBridge's trace header
    traceparent: str | None = None


class Sink(Protocol):
    """A destination of batch messages. ``max_message_bytes`` is the largest body it accepts,
    counted as ``measure_body`` counts one: the encoded message's bytes as the sink writes them
    (the SQS sink escapes some characters). The flush's byte cap is that limit in that measure
    (``Policy.measure_body``), so a batch under the cap is never refused for its size."""

    max_message_bytes: int
    measure_body: Callable[[bytes], int]  # a plain function (picklable: the Spark jobs carry it)

    def publish(self, batches: Sequence[OutgoingBatch]) -> dict[int, str]:
        """Deliver ``batches``; return ``{index: error}`` for those NOT confirmed (empty = all
        delivered). Never raises for a delivery failure."""
        ...

    def close(self) -> None:
        """Release connections; pending deliveries are flushed or abandoned (never confirmed)."""
        ...


def chunk_by_size(indexes: Sequence[int], sizes: Sequence[int], max_count: int, max_bytes: int) -> list[list[int]]:
    """``indexes`` in order, as consecutive requests of at most ``max_count`` entries whose
    ``sizes`` add up to at most ``max_bytes`` (an entry larger than that goes alone)."""
    chunks: list[list[int]] = []
    total = 0
    for index in indexes:
        if not chunks or len(chunks[-1]) >= max_count or total + sizes[index] > max_bytes:
            chunks.append([])
            total = 0
        chunks[-1].append(index)
        total += sizes[index]
    return chunks


DEFAULT_TIMEOUT_S = 10.0


def aws_client_config(timeout_s: float):
    """botocore config under which one API call (both attempts) ends within about ``timeout_s``."""
    from botocore.config import Config

    per_attempt = max(0.5, timeout_s / 5)  # two attempts of connect + read: 4/5 of the budget
    return Config(connect_timeout=per_attempt, read_timeout=per_attempt,
                  retries={"total_max_attempts": 2, "mode": "standard"})


def _query(url: str) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlsplit(url).query).items()}


def sink_from_url(url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Sink:
    """Build the sink (waiting at most ``timeout_s`` per publish) for one of:

    - ``kafka://<bootstrap servers, comma separated>/<topic>[?auth=iam&region=...&max_message_bytes=N]``
    - ``sqs://sqs.<region>.amazonaws.com/<account>/<queue>``
    - ``events://<event-bus-name>[?source=...&detail_type=...]``
    - ``file:///abs/path.jsonl`` or ``file://./relative.jsonl``
    """
    parts = urlsplit(url)
    query = _query(url)
    if parts.scheme == "kafka":
        from consolidator.sinks.kafka import KafkaSink

        topic = parts.path.strip("/")
        if not parts.netloc or not topic or "/" in topic:
            raise ValueError(f"kafka sink URL needs servers and one topic: {masked(url)!r}")
        auth = query.get("auth")
        if auth not in (None, "iam"):
            raise ValueError(f"kafka sink auth must be 'iam' when given, got {auth!r}")
        limit = query.get("max_message_bytes", "")
        if limit and not (limit.isdigit() and 0 < int(limit) <= 100_000_000):
            raise ValueError(f"kafka sink max_message_bytes must be a positive integer of bytes, got {limit!r}")
        return KafkaSink(parts.netloc, topic, iam_region=query.get("region") if auth == "iam" else None,
                         iam=auth == "iam", flush_timeout_s=timeout_s, **({"max_message_bytes": int(limit)} if limit else {}))
    if parts.scheme == "sqs":
        from consolidator.sinks.sqs import SqsSink

        if not parts.netloc or parts.path.count("/") != 2:
            raise ValueError(f"sqs sink URL must be sqs://sqs.<region>.amazonaws.com/<account>/<queue>: {masked(url)!r}")
        return SqsSink("https://" + parts.netloc + parts.path, timeout_s=timeout_s)
    if parts.scheme == "events":
        from consolidator.sinks.eventbridge import EventBridgeSink

        if not parts.netloc:
            raise ValueError(f"events sink URL needs an event bus name: {masked(url)!r}")
        return EventBridgeSink(
            parts.netloc,
            source=query.get("source", "consolidator"),
            detail_type=query.get("detail_type", "ConsolidatedBatch"),
            timeout_s=timeout_s,
        )
    if parts.scheme == "file":
        from pathlib import Path

        from consolidator.sinks.file import FileSink

        path = (parts.netloc or "") + parts.path
        if not parts.path:
            raise ValueError(f"file sink URL needs a path: {masked(url)!r}")
        return FileSink(Path(path))
    raise ValueError(f"unsupported sink URL {masked(url)!r}: use kafka://, sqs://, events:// or file://")


__all__ = ["DEFAULT_TIMEOUT_S", "OutgoingBatch", "Sink", "aws_client_config", "chunk_by_size", "sink_from_url"]
