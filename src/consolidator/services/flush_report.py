"""What a flush tick reports: its published batches, and the metrics and logs of its outcomes."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from consolidator.rules.errors import DuplicateBatchId
from consolidator.rules.policy import FlushReason
from consolidator.services.metrics import MetricsRecorder

log = logging.getLogger("consolidator.services.flush")

REASON_METRICS = {
    FlushReason.IDLE: "BatchesFlushedIdle",
    FlushReason.HARD_WINDOW: "BatchesFlushedHardWindow",
    FlushReason.FULL: "BatchesFlushedFull",
}


@dataclass
class PublishedBatch:
    batch_id: str
    group_key: str
    reason: FlushReason
    size: int  # member rows
    attempt: int


@dataclass
class TickReport:
    skipped: str | None = None  # None, "lock_held" or "lock_unavailable"
    published: list[PublishedBatch] = field(default_factory=list)  # confirmed by the sink
    dead: int = 0  # batches that became DEAD this tick
    publish_failures: int = 0  # failed attempts: publishes the sink refused, and batches not built
    build_failures: int = 0  # of those, batches whose message (or split) could not be built
    error: str | None = None  # why the lock backend was unreachable (skipped = "lock_unavailable")
    throttled: dict[str, int] = field(default_factory=dict)  # due groups refused: next allowed time
    expired: int = 0  # rows dead-lettered as expired and marked EXPIRED this tick
    lock_lost: bool = False  # the lock was lost mid-tick: no claim after that


def duplicate_batch_id(metrics: MetricsRecorder, error: DuplicateBatchId) -> None:
    """A claim refused because its batch id is taken: never silent. Counted in
    ``DuplicateBatchIds`` and logged at ERROR with the id and the group; the rows stay PENDING."""
    metrics.add_metric(name="DuplicateBatchIds", unit="Count", value=1)
    log.error("claim refused: its batch id is already taken by a stored batch; rows stay PENDING",
              extra={"batch_id": error.batch_id, "group_key": error.group_key, "error": str(error)})
