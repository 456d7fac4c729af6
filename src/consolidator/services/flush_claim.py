"""The claim step of a flush tick, over a small cursor: for one due group, expire its rows over
the TTL (:meth:`ClaimStep.expire`), then claim its batches (:meth:`ClaimStep.claim`), each
batch joining the tick's outbox, which :class:`~consolidator.services.flush.FlushService`
delivers (publishes, then marks SENT) a chunk at a time.

Guarantees are the flush's (``services/flush.py``): a claim's batch id is fixed at claim time; a
group refused by its rate limit stays PENDING and the tick moves on; a claim error is logged and
the group retried next tick; a tick never takes more than its rows or time allow. An unexpected
error while a group's batch is built (its split, its message) fails that group only: it is
counted and logged with its reason, and the group's first row is claimed alone as a batch that
failed once (:meth:`~consolidator.store.batches.BatchStore.claim_unbuilt`), retried and, after
``max_attempts`` failures, dead-lettered as a batch whose publishes failed; the tick goes on
with the other groups, and the group's later rows are claimed as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from consolidator.rules.errors import DuplicateBatchId, StoreError, StoreRefused, StoreUnavailable
from consolidator.rules.policy import FlushReason, Policy, RateLimit, due_reason
from consolidator.rules.split import MessageOptions
from consolidator.services.expiry import Expiry
from consolidator.services.flush_report import TickReport, duplicate_batch_id
from consolidator.services.metrics import MetricsRecorder
from consolidator.store.claims import ClaimCursor
from consolidator.store.mysql import ClaimedBatch, MySQLStore, Throttled

log = logging.getLogger("consolidator.services.flush")


@dataclass
class Tick:
    """The cursor of one tick: its time, the rows handled so far against ``max_rows``, the TTL
    cutoff, and the claimed batches not delivered yet."""

    now: int
    remaining_ms: Callable[[], int] | None
    report: TickReport
    max_rows: int
    safety_margin_ms: int
    rows: int = 0
    cutoff: int | None = None
    outbox: list[ClaimedBatch] = field(default_factory=list)

    def has_room(self) -> bool:
        """Rows and time left for more work (no new work within the safety margin)."""
        return self.rows < self.max_rows and (self.remaining_ms is None or self.remaining_ms() > self.safety_margin_ms)


@dataclass
class Group:
    """One due group during a tick: why it is due now (None: not any more), the PENDING rows the
    stats counted and not claimed yet, its rate limit, and the rows its current claim may still take."""

    key: str
    reason: FlushReason | None
    known: int
    rate: RateLimit | None
    limit: int


@dataclass
class ClaimStep:
    """Expire and claim, group by group, for one tick. ``deliver`` publishes and marks a full
    chunk of ``publish_chunk`` claimed batches."""

    store: MySQLStore
    policy: Policy
    metrics: MetricsRecorder
    epochs: Mapping[str, int]  # the topics' epochs the batch ids name, read once per tick
    expiry: Callable[[], Expiry]
    deliver: Callable[[list[ClaimedBatch]], None]
    publish_chunk: int
    options: MessageOptions  # the message's shape and tracking: the claim sizes batches by them

    def expire(self, tick: Tick, group: Group, oldest_record_ts_ms: int | None) -> None:
        """Claim the group's rows over the TTL under expiry records and dead-letter them
        (:class:`Expiry`); the group's reason and PENDING count are then read again."""
        if (tick.cutoff is None or (oldest_record_ts_ms is not None and oldest_record_ts_ms >= tick.cutoff)
                or not tick.has_room()):
            return
        claimed, expired = self.expiry().expire_group(group.key, tick.cutoff, tick.now)
        tick.report.expired += expired
        if claimed:
            tick.rows += claimed
            self._reread(tick, group)

    def claim(self, tick: Tick, group: Group) -> None:
        """Claim the group's batches while it is due and the tick has room; each batch joins the
        tick's outbox, delivered once a chunk is full."""
        cursor = ClaimCursor(group.key, group.limit)  # what the claim read and has not taken yet
        while group.reason is not None and tick.has_room():
            batch = self._claim_batch(tick, group, cursor)
            if batch is None:
                return
            tick.rows += len(batch.members)
            group.known -= len(batch.members)
            tick.outbox.append(batch)
            if len(tick.outbox) >= self.publish_chunk:
                self.deliver(tick.outbox)
                tick.outbox = []
            cursor = self._next_claim(tick, group, batch, cursor)
            if cursor is None:
                return

    def _claim_batch(self, tick: Tick, group: Group, cursor: ClaimCursor) -> ClaimedBatch | None:
        """One batch of the group, or None when the group is done for this tick: nothing left to
        take, refused by its rate limit, or a claim error (logged and counted; retried next tick)."""
        try:
            batch = self.store.claim(group.key, group.reason, group.limit, tick.now,
                                     max_bytes=self.policy.max_batch_bytes, rate=group.rate,
                                     expired_before_ms=tick.cutoff, cursor=cursor, epochs=self.epochs,
                                     options=self.options)
        except DuplicateBatchId as error:
            duplicate_batch_id(self.metrics, error)
            return None
        except StoreError as error:
            log.warning("claim skipped this tick", extra={"group_key": group.key, "error": str(error)})
            return None
        except (StoreUnavailable, StoreRefused):
            raise  # the database, not this group: the tick stops (the next one resumes)
        except Exception as error:  # noqa: BLE001 - building this group's batch failed: this group only
            self._unbuilt(tick, group, error)
            return None
        if batch is None:
            return None
        if isinstance(batch, Throttled):
            tick.report.throttled[group.key] = batch.until_ms
            self.metrics.add_metric(name="GroupsThrottled", unit="Count", value=1)
            log.info("due group throttled by its rate limit",
                     extra={"group_key": group.key, "until_ms": batch.until_ms, "since_ms": batch.since_ms})
            return None
        if batch.held_back_ms:
            self.metrics.add_metric(name="ThrottledWaitSeconds", unit="Seconds", value=batch.held_back_ms / 1000)
        log.info("batch claimed", extra={"batch_id": batch.batch_id, "group_key": batch.group_key,
                                         "reason": str(group.reason), "size": len(batch.members)})
        return batch

    def _unbuilt(self, tick: Tick, group: Group, error: Exception) -> None:
        """The group's batch could not be built (an unexpected error, a bug or a stored row this
        code cannot read): counted and logged with the reason; the group's first row is claimed
        alone as a batch that failed once, so the failure is retried and, after ``max_attempts``,
        dead-lettered, and the group's other rows are not held up by it."""
        reason = f"batch not built: {type(error).__name__}: {error}"[:1024]
        tick.report.build_failures += 1
        tick.report.publish_failures += 1
        self.metrics.add_metric(name="BatchBuildFailures", unit="Count", value=1)
        self.metrics.add_metric(name="PublishFailures", unit="Count", value=1)
        log.error("batch of group %s not built; its first row is set aside as a failed batch: %s",
                  group.key, reason, exc_info=error, extra={"group_key": group.key, "error": reason})
        try:
            set_aside = self.store.claim_unbuilt(group.key, group.reason, tick.now, reason, rate=group.rate,
                                                 expired_before_ms=tick.cutoff, epochs=self.epochs)
        except StoreError as store_error:
            log.warning("failed batch not set aside; the group is retried next tick",
                        extra={"group_key": group.key, "error": str(store_error)})
            return
        if isinstance(set_aside, str):
            tick.rows += 1
            log.info("row set aside as a failed batch", extra={"group_key": group.key, "batch_id": set_aside})

    def _next_claim(self, tick: Tick, group: Group, batch: ClaimedBatch,
                    cursor: ClaimCursor) -> ClaimCursor | None:
        """After a batch: the cursor the group's next batch continues from, or None when the
        group is done. A batch split under the byte cap or the int64 sums continues its claim
        (same reason, the rows it may still take); a full claim starts a new one after reading
        the group's reason again, unless the stats' rows are all taken; a short one means the
        group had no more PENDING rows to take."""
        if batch.cut:
            group.limit -= len(batch.members)
            if group.limit > 0:
                return cursor
        elif len(batch.members) < group.limit:
            return None
        group.limit = self.policy.max_batch_size
        if group.known <= 0:
            return None  # every row the stats counted is claimed: no query for what is left
        self._reread(tick, group)
        return ClaimCursor(group.key, group.limit)

    def _reread(self, tick: Tick, group: Group) -> None:
        """The group's reason and PENDING rows now (None and 0 when none is left)."""
        left = self.store.pending_group_stats(group.key)
        group.reason, group.known = (due_reason(left[0], tick.now, self.policy), left[0].pending) if left else (None, 0)
