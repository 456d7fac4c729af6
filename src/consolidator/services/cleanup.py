"""Cleanup use case: monthly partitions ready ahead of time, old ones dropped when fully sent.

Guarantees:
- every month from the clock's month through ``partitions_ahead`` months later has its own
  partition after a run (the MAXVALUE partition is split; it is never dropped);
- a partition is dropped only when all of its months are older than ``retention_months``
  before the clock's month AND no row in it is unsent: PENDING, or CLAIMED under a batch that
  is still CLAIMED (checked and dropped under table locks by the store), so a drop never loses
  an unsent row;
- a refused drop is reported with the number of unsent rows that blocked it;
- idempotent: a second run at the same time creates and drops nothing.
- retention of the bookkeeping: a ``batches`` row goes once it was claimed before the first
  month kept and none of its member rows is left (never a CLAIMED batch, never a DEAD one with
  live rows: a redrive can still revive it); a group's rate state goes once it has been idle
  since then and for longer than any rate window (:data:`~consolidator.rules.policy.MAX_RATE_PERIOD_MS`),
  so no state still inside its window is pruned. Each count is reported.
- completion trackers (when ``completion_max_age_ms`` is set): those whose completion was
  published go with the partitions (sealed before the first month kept); those of DEAD
  batches, and those never completed within ``completion_max_age_ms``, are removed; each
  count is reported.
"""

from __future__ import annotations

import calendar
from dataclasses import asdict, dataclass, field

from consolidator.rules.clock import Clock
from consolidator.rules.events import bucket_of, months_after
from consolidator.rules.policy import MAX_RATE_PERIOD_MS
from consolidator.services.metrics import MetricsRecorder, NoMetrics
from consolidator.store.mysql import MySQLStore, PartitionInfo


@dataclass(frozen=True)
class RefusedDrop:
    partition: str
    unsent_rows: int


@dataclass
class CleanupReport:
    month: int  # the clock's month (YYYYMM)
    ensured_through: int  # last month that has its own partition now
    keep_from: int  # partitions holding only months before this one are drop candidates
    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    refused: list[RefusedDrop] = field(default_factory=list)
    trackers_removed: dict[str, int] = field(default_factory=dict)  # finished, dead, orphaned
    batches_pruned: int = 0  # batch rows whose member rows all went with their partitions
    rate_states_pruned: int = 0  # rate states idle since before the first month kept

    @property
    def changed(self) -> bool:
        return bool(self.created or self.dropped)

    def as_dict(self) -> dict:
        return asdict(self)


def _month_start_ms(bucket: int) -> int:
    """Epoch milliseconds of the first moment of month ``bucket`` (YYYYMM, UTC)."""
    return calendar.timegm((bucket // 100, bucket % 100, 1, 0, 0, 0)) * 1000


def expired(partition: PartitionInfo, keep_from: int) -> bool:
    """True when every month the partition can hold is before ``keep_from``."""
    return partition.less_than is not None and partition.less_than <= keep_from


@dataclass
class CleanupService:
    store: MySQLStore
    clock: Clock
    retention_months: int = 3
    partitions_ahead: int = 3
    metrics: MetricsRecorder = field(default_factory=NoMetrics)
    completion_max_age_ms: int | None = None  # None: leave completion trackers alone

    def __post_init__(self) -> None:
        if self.retention_months < 1 or self.partitions_ahead < 1:
            raise ValueError("retention_months and partitions_ahead must be at least 1")

    def plan(self) -> CleanupReport:
        """The months this run works with, nothing changed."""
        month = bucket_of(self.clock.now_ms())
        return CleanupReport(
            month=month,
            ensured_through=months_after(month, self.partitions_ahead),
            keep_from=months_after(month, -self.retention_months),
        )

    def ensure(self, report: CleanupReport | None = None) -> CleanupReport:
        """Split MAXVALUE so that every month through ``ensured_through`` has a partition."""
        report = report or self.plan()
        report.created.extend(self.store.add_partitions_through(report.ensured_through))
        return report

    def candidates(self, report: CleanupReport | None = None) -> list[PartitionInfo]:
        """Partitions old enough to drop (whether they hold unsent rows or not)."""
        keep_from = (report or self.plan()).keep_from
        return [p for p in self.store.partitions() if expired(p, keep_from)]

    def drop_expired(self, report: CleanupReport | None = None) -> CleanupReport:
        report = report or self.plan()
        for partition in self.candidates(report):
            blocking = self.store.drop_partition_if_sent(partition.name)
            if blocking:
                report.refused.append(RefusedDrop(partition.name, blocking))
            else:
                report.dropped.append(partition.name)
        return report

    def remove_trackers(self, report: CleanupReport | None = None) -> CleanupReport:
        """Remove finished, DEAD and orphaned completion trackers (see the module docstring)."""
        report = report or self.plan()
        if self.completion_max_age_ms is None:
            return report
        keep_from_ms = _month_start_ms(report.keep_from)
        report.trackers_removed = {
            "finished": self.store.delete_trackers("finished", keep_from_ms),
            "dead": self.store.delete_trackers("dead", 0),
            "orphaned": self.store.delete_trackers("orphaned", self.clock.now_ms() - self.completion_max_age_ms),
        }
        return report

    def prune(self, report: CleanupReport | None = None) -> CleanupReport:
        """Prune what the dropped partitions leave behind (see the module docstring): the
        ``batches`` rows claimed before the first month kept whose member rows are all gone, and
        the rate states idle since then (longer than any rate window)."""
        report = report or self.plan()
        keep_from_ms = _month_start_ms(report.keep_from)
        report.batches_pruned = self.store.prune_batches(keep_from_ms)
        report.rate_states_pruned = self.store.prune_rate_states(min(keep_from_ms,
                                                                     self.clock.now_ms() - MAX_RATE_PERIOD_MS))
        return report

    def run(self) -> CleanupReport:
        """Ensure future partitions first (so the current month always has one), then drop, then
        prune what the drops left behind."""
        report = self.prune(self.remove_trackers(self.drop_expired(self.ensure())))
        if report.trackers_removed:
            self.metrics.add_metric(name="OrphanedTrackersRemoved", unit="Count",
                                    value=report.trackers_removed["orphaned"])
        for name, value in (
            ("PartitionsCreated", len(report.created)),
            ("PartitionsDropped", len(report.dropped)),
            ("PartitionDropsRefused", len(report.refused)),
            ("UnsentRowsBlockingDrops", sum(r.unsent_rows for r in report.refused)),
            ("BatchRowsPruned", report.batches_pruned),
            ("RateStatesPruned", report.rate_states_pruned),
        ):
            self.metrics.add_metric(name=name, unit="Count", value=value)
        return report


def build_cleanup_service(settings, metrics: MetricsRecorder | None = None, clock: Clock | None = None) -> CleanupService:
    """Wire the service from :class:`~consolidator.settings.CleanupSettings`."""
    from consolidator.rules.clock import SystemClock
    from consolidator.store import open_store

    return CleanupService(
        store=open_store(settings.database_url, settings.database_secret_arn),
        clock=clock or SystemClock(),
        retention_months=settings.retention_months,
        partitions_ahead=settings.partitions_ahead,
        metrics=metrics or NoMetrics(),
        completion_max_age_ms=round(settings.completion_max_age_seconds * 1000),
    )
