"""The metrics port of the services: what they record, not how (the Lambda handlers pass
Powertools' ``Metrics``, whose EMF lines CloudWatch reads; the worker passes its Prometheus
registry; the CLI, tests and Spark pass nothing and get :class:`NoMetrics`).

:data:`METRICS` is the one list of every metric: its name as the services record it (the EMF
name in CloudWatch), its unit, kind and meaning, and which part records it. The worker's
``/metrics`` serves them under :func:`prometheus_name` (Prometheus' conventions: snake case,
base unit seconds, ``_total`` on counters); a test keeps the list complete, and
``docs/reference/metrics.md`` is generated from it (``make docs``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Protocol


class MetricsRecorder(Protocol):
    """What Powertools' ``Metrics`` offers; services depend on this, not on Powertools."""

    def add_metric(self, name: str, unit: str, value: float) -> None: ...


class NoMetrics:
    """Records nothing."""

    def add_metric(self, name: str, unit: str, value: float) -> None:
        pass


Kind = Literal["counter", "gauge", "summary", "histogram"]
# Upper bounds (seconds) of the latency histogram's buckets: around the default tick (30 s),
# debounce (300 s) and hard window (1800 s); Prometheus adds +Inf.
LATENCY_BUCKETS_S = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 2700.0, 3600.0, 7200.0)


@dataclass(frozen=True)
class Metric:
    name: str  # as recorded (EMF, CloudWatch)
    unit: Literal["Count", "Milliseconds", "Seconds"]
    # counter: a sum of what is recorded; gauge: the last value; summary: count and sum; histogram:
    # count, sum and counts per bucket on Prometheus (CloudWatch keeps every value: percentiles)
    kind: Kind
    source: Literal["ingest", "flush", "acks", "cleanup", "worker"]
    help: str
    labels: tuple[str, ...] = ()  # a worker series per label set (topic, partition)
    buckets: tuple[float, ...] = ()  # a histogram's bucket upper bounds, in seconds


def _h(name, unit, source, text, buckets) -> Metric:
    return Metric(name, unit, "histogram", source, text, (), buckets)


def _m(name, unit, kind, source, text, labels=()) -> Metric:
    return Metric(name, unit, kind, source, text, labels)


PARTITION = ("topic", "partition")
METRICS: tuple[Metric, ...] = (
    # ingest (the Lambda function and the worker)
    _m("RecordsIngested", "Count", "counter", "ingest", "records stored as new buffer rows"),
    _m("RecordsCoalesced", "Count", "counter", "ingest", "records that replaced the items of a pending row"),
    _m("RecordsReplayed", "Count", "counter", "ingest", "records at or below their partition's high-water mark"
                                                        " (no-ops)"),
    _m("RecordsDeadLettered", "Count", "counter", "ingest", "poison records written to the dead-letter"
                                                            " destination"),
    _m("RecordsFailed", "Count", "counter", "ingest", "records not made durable by a write (retried)"),
    # flush (the Lambda function and the worker)
    _m("TicksSkipped", "Count", "counter", "flush", "flush ticks skipped: the lock was held elsewhere or Redis"
                                                    " was unreachable"),
    _m("PendingGroups", "Count", "gauge", "flush", "groups with PENDING rows at the last tick"),
    _m("OldestPendingAge", "Milliseconds", "gauge", "flush", "age of the oldest PENDING row at the last tick"),
    _m("BatchesFlushed", "Count", "counter", "flush", "batches published and marked SENT"),
    _m("BatchesFlushedIdle", "Count", "counter", "flush", "batches published because their group went quiet"),
    _m("BatchesFlushedHardWindow", "Count", "counter", "flush", "batches published at their group's hard"
                                                                " window"),
    _m("BatchesFlushedFull", "Count", "counter", "flush", "batches published because their group was full"),
    _m("BatchSize", "Count", "summary", "flush", "members per published batch"),
    _h("EventToPublishLatency", "Milliseconds", "flush", "from a batch's oldest member first seen to its publish",
       LATENCY_BUCKETS_S),
    _m("PublishFailures", "Count", "counter", "flush", "publishes the sink refused (the batch stays CLAIMED)"),
    _m("BatchBuildFailures", "Count", "counter", "flush", "batches whose message or rows could not be built (a"
                                                          " failed attempt of that batch only)"),
    _m("DeadBatches", "Count", "counter", "flush", "batches dead-lettered after max attempts"),
    _m("EventsExpired", "Count", "counter", "flush", "rows dead-lettered as expired (over the TTL)"),
    _m("GroupsThrottled", "Count", "counter", "flush", "due groups held back by their rate limit"),
    _m("ThrottledWaitSeconds", "Seconds", "summary", "flush", "how long a throttled batch was held back"),
    _m("DuplicateBatchIds", "Count", "counter", "flush", "claims refused because their batch id was taken"),
    _m("FlushLockLost", "Count", "counter", "flush", "ticks that stopped claiming because the lock was lost"),
    # acks and cleanup (Lambda functions)
    _m("AcksApplied", "Count", "counter", "acks", "member acks applied"),
    _m("AcksDuplicate", "Count", "counter", "acks", "member acks already applied"),
    _m("AcksRefused", "Count", "counter", "acks", "acks refused for good"),
    _m("AcksFailed", "Count", "counter", "acks", "acks that failed and are retried"),
    _m("CompletionPublishFailures", "Count", "counter", "acks", "completion messages the sink refused"),
    _m("BatchesCompleted", "Count", "counter", "acks", "completion messages published"),
    _m("IncompleteBatches", "Count", "gauge", "acks", "sent batches past the completion deadline"),
    _m("OldestIncompleteAge", "Milliseconds", "gauge", "acks", "age of the oldest incomplete batch"),
    _m("OrphanedTrackersRemoved", "Count", "counter", "cleanup", "trackers never completed, removed"),
    _m("PartitionsCreated", "Count", "counter", "cleanup", "monthly partitions created ahead"),
    _m("PartitionsDropped", "Count", "counter", "cleanup", "monthly partitions dropped"),
    _m("PartitionDropsRefused", "Count", "counter", "cleanup", "partition drops refused: unsent rows"),
    _m("UnsentRowsBlockingDrops", "Count", "counter", "cleanup", "unsent rows in partitions past retention"),
    _m("BatchRowsPruned", "Count", "counter", "cleanup", "batch rows whose members were dropped"),
    _m("RateStatesPruned", "Count", "counter", "cleanup", "rate states of groups idle past every window"),
    # the worker's own (consolidator worker; Prometheus only)
    _m("WorkerWriteSeconds", "Seconds", "summary", "worker", "duration of one database write of consumed"
                                                             " records"),
    _m("WorkerWriteFailures", "Count", "counter", "worker", "writes after which a partition was paused to retry"),
    _m("OffsetsCommitted", "Count", "counter", "worker", "partition offsets Kafka confirmed committed"),
    _m("OffsetCommitFailures", "Count", "counter", "worker", "partition offsets Kafka did not commit (retried)"),
    _m("PartitionsAssigned", "Count", "counter", "worker", "partitions assigned to this worker"),
    _m("PartitionsRevoked", "Count", "counter", "worker", "partitions revoked from this worker"),
    _m("PartitionsLost", "Count", "counter", "worker", "partitions lost by this worker (not committed)"),
    _m("AssignedPartitions", "Count", "gauge", "worker", "partitions this worker owns now"),
    _m("BufferedRecords", "Count", "gauge", "worker", "records fetched and not durable yet, held in memory"),
    _m("PartitionLag", "Count", "gauge", "worker", "records of the partition not durable yet (high watermark"
                                                   " minus the first offset not durable)", PARTITION),
    _m("PartitionPaused", "Count", "gauge", "worker", "1 while the partition is paused (its write failed, or the"
                                                      " worker holds its maximum of records)", PARTITION),
    _m("FlushTickDuration", "Seconds", "summary", "worker", "duration of one flush tick"),
    _m("FlushTickFailures", "Count", "counter", "worker", "flush ticks that ended in an error (retried next tick)"),
    _m("FlushLockHeld", "Count", "gauge", "worker", "1 while this worker's flush tick holds the Redis lock"),
)
BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}


def prometheus_name(metric: Metric) -> str:
    """``consolidator_`` and the snake-case name; time in seconds (``_seconds``); counters end
    in ``_total``: ``RecordsIngested`` -> ``consolidator_records_ingested_total``,
    ``OldestPendingAge`` (ms) -> ``consolidator_oldest_pending_age_seconds``."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", metric.name).lower()
    if metric.unit in ("Milliseconds", "Seconds") and not snake.endswith("_seconds"):
        snake += "_seconds"
    return f"consolidator_{snake}" + ("_total" if metric.kind == "counter" else "")


def base_value(metric: Metric, value: float) -> float:
    """``value`` in the metric's Prometheus base unit (milliseconds become seconds)."""
    return value / 1000 if metric.unit == "Milliseconds" else value
