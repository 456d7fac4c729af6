"""The MySQL buffer's ingest and claim rules, in memory, for one group (used by both Spark jobs).

Mirrors ``store/mysql.py`` row for row, so the same event history yields the same batches:

- S1: a source position already seen by this buffer changes nothing;
- S2: rows are keyed while PENDING by (bucket of the record timestamp, item id); a new event
  for a pending row adds to ``merged_events``, replaces items and position only when its
  position is greater, moves ``last_update`` forward and never moves ``first_seen``;
- S3: an event for an item whose row was claimed starts a new row (claimed rows leave the buffer);
- claims are exactly :func:`consolidator.policy.plan_batches` over :class:`~consolidator.batch.Member` rows.

Not thread-safe; one buffer per group key.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from consolidator.batch import Member, fit_claims
from consolidator.events import Event, SourcePosition, bucket_of
from consolidator.policy import FlushReason, GroupStats, Policy, next_due_ms, plan_batches

RowKey = tuple[int, str]  # (bucket, item_id)


@dataclass(frozen=True, slots=True)
class BufferedEvent:
    """A decoded event, as the Spark jobs carry it (items already parsed)."""

    position: SourcePosition
    timestamp_ms: int
    item_id: str
    items: tuple[tuple[str, int], ...]


@dataclass
class PendingBuffer:
    """PENDING rows of one group. ``seen`` is the S1 position ledger (None disables it)."""

    group_key: str
    rows: dict[RowKey, Member] = field(default_factory=dict)
    seen: set[SourcePosition] | None = field(default_factory=set)
    _oldest_first_seen: int | None = None
    _newest_update: int | None = None

    def ingest(self, event: BufferedEvent | Event, now_ms: int) -> str:
        """Apply one event (anything with position, timestamp_ms, item_id, items) at ``now_ms``; returns ``"stored"``, ``"coalesced"`` or ``"replayed"``."""
        if self.seen is not None:
            if event.position in self.seen:
                return "replayed"
            self.seen.add(event.position)
        key = (bucket_of(event.timestamp_ms), event.item_id)
        current = self.rows.get(key)
        if current is None:
            self.rows[key] = Member(event.position, event.item_id, event.items, now_ms, now_ms, 1)
            outcome = "stored"
            if self._oldest_first_seen is None or now_ms < self._oldest_first_seen:
                self._oldest_first_seen = now_ms
        else:
            newer = event.position > current.position
            self.rows[key] = Member(
                position=event.position if newer else current.position,
                item_id=current.item_id,
                items=event.items if newer else current.items,
                first_seen_ms=current.first_seen_ms,
                last_update_ms=max(current.last_update_ms, now_ms),
                merged_events=current.merged_events + 1,
            )
            outcome = "coalesced"
        if self._newest_update is None or now_ms > self._newest_update:
            self._newest_update = now_ms
        return outcome

    def stats(self) -> GroupStats:
        if not self.rows:
            return GroupStats(self.group_key, 0, 0, 0)
        return GroupStats(self.group_key, len(self.rows), self._oldest_first_seen or 0, self._newest_update or 0)

    def next_due_ms(self, policy: Policy) -> int | None:
        """When the group becomes due if nothing else arrives (None when empty)."""
        return next_due_ms(self.stats(), policy)

    def flush(self, now_ms: int, policy: Policy) -> list[tuple[FlushReason, list[Member]]]:
        """Claim every due batch at ``now_ms`` (``plan_batches``); claimed rows leave the buffer."""
        if not self.rows:
            return []
        keys = {member.position: key for key, member in self.rows.items()}
        claims, remaining = plan_batches(self.group_key, self.rows.values(), now_ms, policy)
        claims = fit_claims(self.group_key, claims, now_ms, policy)  # under policy.max_batch_bytes
        if claims:
            self.rows = {keys[m.position]: m for m in remaining}
            self._recompute()
        return claims

    @classmethod
    def restore(cls, group_key: str, rows: Iterable[tuple[RowKey, Member]]) -> PendingBuffer:
        """A buffer holding ``rows`` (from Spark state), without a position ledger."""
        buffer = cls(group_key, dict(rows), seen=None)
        buffer._recompute()
        return buffer

    def _recompute(self) -> None:
        self._oldest_first_seen = min((m.first_seen_ms for m in self.rows.values()), default=None)
        self._newest_update = max((m.last_update_ms for m in self.rows.values()), default=None)
