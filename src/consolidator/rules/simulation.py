"""The reference simulation of the serverless path for one group: what the Lambda functions
would have published, tick by tick, for a group's events (the replay's reference, and the
reference every faster simulation is proven equal to).

Records are ingested in (timestamp, position) order with the clock at their record timestamp
into a :class:`~consolidator.rules.buffer.PendingBuffer` (the MySQL buffer's rules); flush ticks
run on the epoch-aligned grid of ``tick_interval`` through
:func:`consolidator.rules.policy.plan_group`; messages are built by
:func:`consolidator.rules.batch.build_message` with ``flushed_at`` = the tick.

Guarantees: deterministic (same events and policy, same batches, ids and expired entries); every
event that is not a replay of a position already seen is in exactly one batch or one expired
entry once the simulation ends (it keeps ticking until nothing is pending).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from consolidator.rules.batch import Member, build_message
from consolidator.rules.buffer import BufferedEvent, PendingBuffer
from consolidator.rules.deadletter import expired_entry
from consolidator.rules.events import DEFAULT_NAMES, FieldNames
from consolidator.rules.policy import FlushReason, Policy, is_expired, next_tick_ms


@dataclass(frozen=True, slots=True)
class ReplayBatch:
    group_key: str
    reason: FlushReason
    flushed_at_ms: int
    members: tuple[Member, ...]
    message: dict = field(repr=False)
    held_back_ms: int = 0

    @property
    def batch_id(self) -> str:
        return self.message["batch_id"]

    @property
    def latencies_ms(self) -> list[int]:
        """Per member row: flushed_at - first_seen."""
        return [self.flushed_at_ms - m.first_seen_ms for m in self.members]


@dataclass(frozen=True, slots=True)
class GroupReplay:
    batches: list[ReplayBatch]
    records_in: int
    replayed: int
    expired: list[dict] = field(default_factory=list)  # dead-letter entries (reason ``expired``)
    late: list[bool] = field(default_factory=list)  # per expired entry: a late arrival (:func:`is_late`)


def is_late(member: Member, policy: Policy) -> bool:
    """Whether ``member``'s newest event was already older than the TTL when its row first
    appeared (a late arrival: only an event time field makes one possible)."""
    return is_expired(member.record_ts_ms, member.first_seen_ms, policy)


def simulate_group(group_key: str, events: Sequence[BufferedEvent], policy: Policy,
                   names: FieldNames = DEFAULT_NAMES) -> GroupReplay:
    """All batches one group yields under ``policy`` on the serverless tick schedule, its messages
    of the shape and event times of ``names`` (the field names its events were read with).

    Jumps straight to the next tick where something can happen: the first tick at or after
    the group's ``next_due_ms``, unless the next record arrives at or before it (then that
    record is ingested first, as the serverless path ingests every record with
    timestamp <= T before the tick at T). A group held back by its rate limit is looked at
    again at the first tick where the limit allows a batch or a row goes over the TTL.
    """
    ordered = sorted(events, key=lambda e: (e.timestamp_ms, e.position))
    buffer = PendingBuffer(group_key)
    batches: list[ReplayBatch] = []
    expired: list[dict] = []
    late: list[bool] = []
    replayed = 0
    index = 0
    while index < len(ordered) or buffer.rows:
        due = buffer.next_due_ms(policy)
        tick = None if due is None else next_tick_ms(due, policy)
        if index < len(ordered) and (tick is None or ordered[index].timestamp_ms <= tick):
            event = ordered[index]
            index += 1
            if buffer.ingest(event, event.timestamp_ms) == "replayed":
                replayed += 1
            continue
        assert tick is not None  # the loop condition guarantees pending rows here
        plan = buffer.plan(tick, policy, shape=names.shape)
        expired.extend(expired_entry(group_key, m, tick, tick) for m in plan.expired)
        late.extend(is_late(m, policy) for m in plan.expired)
        for claim in plan.claims:
            message = build_message(group_key, claim.rows, claim.reason, flushed_at_ms=tick,
                                    held_back_ms=claim.held_back_ms, shape=names.shape,
                                    event_times=names.event_times)
            batches.append(ReplayBatch(group_key, claim.reason, tick, tuple(claim.rows), message,
                                       claim.held_back_ms))
    return GroupReplay(batches, len(ordered), replayed, expired, late)
