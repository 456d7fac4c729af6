"""The MySQL buffer's ingest and claim rules, in memory, for one group (used by both Spark jobs).

Mirrors ``store/mysql.py`` row for row, so the same event history yields the same batches:

- S1: a source position already seen by this buffer changes nothing;
- S2: rows are keyed while PENDING by (bucket of the event time, item id); a new event
  for a pending row adds to ``merged_events``, replaces items and position only when its
  position is greater, moves ``last_update`` forward and never moves ``first_seen``;
- S3: an event for an item whose row was claimed starts a new row (claimed rows leave the buffer);
- claims, rate limit and TTL are exactly :func:`consolidator.rules.policy.plan_group` over
  :class:`~consolidator.rules.batch.Member` rows, split under the byte cap and int64 sums by
  :func:`claim_split` (each batch counted against the rate limit), with the group's
  :class:`~consolidator.rules.policy.RateState` kept here (the MySQL path keeps it in ``group_rate_state``).

Not thread-safe; one buffer per group key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from consolidator.rules.batch import Member
from consolidator.rules.events import Event, SourcePosition, bucket_of
from consolidator.rules.policy import (
    FlushReason,
    GroupPlan,
    GroupStats,
    Policy,
    RateState,
    expires_at_ms,
    next_due_ms,
    plan_group,
)
from consolidator.rules.shape import REFERENCE_SHAPE, Shape
from consolidator.rules.split import fit_claims

RowKey = tuple[int, str]  # (bucket, item_id)


@dataclass(frozen=True, slots=True)
class BufferedEvent:
    """A decoded event, as the Spark jobs carry it (items already parsed). ``timestamp_ms``: the
    record timestamp (when the replay takes it to arrive); ``event_time_ms``: the event's own
    time when an event time field is configured (the row's ``record_ts_ms`` and month), else None."""

    position: SourcePosition
    timestamp_ms: int
    item_id: str
    items: tuple[tuple[str, int], ...]
    event_time_ms: int | None = None


def event_time_of(event: BufferedEvent | Event) -> int:
    """The time that drives the TTL and the month of ``event``'s row: its event time when it has
    one, else its record timestamp (an :class:`Event` carries its event time as its timestamp)."""
    stamp = getattr(event, "event_time_ms", None)
    return event.timestamp_ms if stamp is None else stamp


def claim_split(group_key: str, now_ms: int, policy: Policy, tracked: bool = False, *,
                shape: Shape = REFERENCE_SHAPE) -> Callable[[FlushReason, list[Member]], list[list[Member]]]:
    """The ``split`` of :func:`~consolidator.rules.policy.plan_group`: a claim as the batches the
    flush's claim makes of it (:func:`~consolidator.rules.split.fit_claims`: byte cap, sums within bounds),
    so that the plan counts each batch against the rate limit, as the Lambda path does."""
    return lambda reason, members: [rows for _, rows in fit_claims(group_key, [(reason, members)], now_ms, policy,
                                                                    tracked, shape=shape)]


@dataclass
class PendingBuffer:
    """PENDING rows of one group. ``seen`` is the S1 position ledger (None disables it)."""

    group_key: str
    rows: dict[RowKey, Member] = field(default_factory=dict)
    seen: set[SourcePosition] | None = field(default_factory=set)
    rate: RateState = field(default_factory=RateState)
    throttled_until_ms: int | None = None  # set while the last plan found the group due and refused
    _oldest_first_seen: int | None = None
    _newest_update: int | None = None

    def ingest(self, event: BufferedEvent | Event, now_ms: int) -> str:
        """Apply one event (anything with position, timestamp_ms, item_id, items) at ``now_ms``; returns ``"stored"``, ``"coalesced"`` or ``"replayed"``."""
        if self.seen is not None:
            if event.position in self.seen:
                return "replayed"
            self.seen.add(event.position)
        stamp = event_time_of(event)
        key = (bucket_of(stamp), event.item_id)
        current = self.rows.get(key)
        if current is None:
            self.rows[key] = Member(event.position, event.item_id, event.items, now_ms, now_ms, 1, stamp)
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
                record_ts_ms=stamp if newer else current.record_ts_ms,
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
        """When the group next needs a look if nothing else arrives (None when empty): when it
        becomes due or, while its rate limit holds it back, when the limit allows a batch again
        or a row goes over the TTL, whichever comes first."""
        due = next_due_ms(self.stats(), policy)
        if due is None or self.throttled_until_ms is None:
            return due
        wake = self.throttled_until_ms
        if policy.ttl_ms:
            newest = [m.record_ts_ms for m in self.rows.values() if m.record_ts_ms is not None]
            if newest:
                wake = min(wake, expires_at_ms(min(newest), policy))
        return max(due, wake)

    def plan(self, now_ms: int, policy: Policy, tracked: bool = False, *,
             shape: Shape = REFERENCE_SHAPE) -> GroupPlan[Member]:
        """:func:`plan_group` at ``now_ms``: claimed and expired rows leave the buffer, the rate
        state moves on; claims split as messages of event shape ``shape`` (:func:`claim_split`)."""
        if not self.rows:
            self.throttled_until_ms = None
            return GroupPlan([], [], [], self.rate)
        keys = {member.position: key for key, member in self.rows.items()}
        plan = plan_group(self.group_key, self.rows.values(), now_ms, policy, self.rate,
                          claim_split(self.group_key, now_ms, policy, tracked, shape=shape))
        self.rate, self.throttled_until_ms = plan.rate, plan.throttled_until_ms
        if plan.claims or plan.expired:
            self.rows = {keys[m.position]: m for m in plan.remaining}
            self._recompute()
        return plan

    def flush(self, now_ms: int, policy: Policy) -> list[tuple[FlushReason, list[Member]]]:
        """Claims of :meth:`plan` as (reason, members), for a policy without TTL or rate limit
        (refuses one: expired rows and hold-back times would be lost)."""
        if policy.ttl_ms or policy.rate_limit or policy.rate_overrides:
            raise ValueError("flush() ignores expiries and hold-back times: use plan()")
        return [(claim.reason, claim.rows) for claim in self.plan(now_ms, policy).claims]

    @classmethod
    def restore(cls, group_key: str, rows: Iterable[tuple[RowKey, Member]], rate: RateState | None = None,
                throttled_until_ms: int | None = None) -> PendingBuffer:
        """A buffer holding ``rows`` and the rate state (from Spark state), without a position ledger."""
        buffer = cls(group_key, dict(rows), seen=None, rate=rate or RateState(),
                     throttled_until_ms=throttled_until_ms)
        buffer._recompute()
        return buffer

    def _recompute(self) -> None:
        self._oldest_first_seen = min((m.first_seen_ms for m in self.rows.values()), default=None)
        self._newest_update = max((m.last_update_ms for m in self.rows.values()), default=None)
