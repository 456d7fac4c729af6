"""The flush policy, pure: which groups are due at time ``now``, why, and what a claim takes.

Both engines use it: the MySQL flush evaluates :func:`due_reason` on group statistics
computed in SQL, the Spark jobs call :func:`plan_group` on rows held in state. Given the
same pending rows and the same ``now`` they produce the same batches.

Rate limit and time-to-live (docs/semantics.md section 7), applied to a due group in this order:
1. rows whose newest event's record timestamp is older than ``ttl_ms`` at ``now`` expire
   (:func:`is_expired`; they go to the dead-letter destination, never into a batch);
2. the rest is claimed as usual, each batch allowed only while the group's sliding-window
   log of recent claim times (:func:`next_allowed_ms`) has room: at most ``batches`` batches
   in any window of ``period_ms`` (a burst of up to ``batches`` at once after a quiet spell).
   A claim split into several batches (byte cap, int64 sums) counts each of them, as the
   Lambda path claims each in its own transaction: a refused batch and the rest of its claim
   stay pending. A refused group stays pending; ``throttled_since`` remembers the first
   refusal, and the claim that ends it reports ``held_back_ms``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, NamedTuple, Protocol, TypeVar


class FlushReason(StrEnum):
    IDLE = "idle"
    HARD_WINDOW = "hard_window"
    FULL = "full"


MAX_RATE_BATCHES = 1_000  # the sliding-window log keeps one timestamp per allowed batch
MAX_RATE_PERIOD_MS = 7 * 86_400_000  # cleanup prunes a rate state idle for longer (store/rate.py)


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``batches`` claims per group in any window of ``period_ms``."""

    batches: int
    period_ms: int

    def __post_init__(self) -> None:
        if not 1 <= self.batches <= MAX_RATE_BATCHES:
            raise ValueError(f"rate limit batches must be 1..{MAX_RATE_BATCHES}, got {self.batches}")
        if not 0 < self.period_ms <= MAX_RATE_PERIOD_MS:
            raise ValueError(f"rate limit period must be 1..{MAX_RATE_PERIOD_MS} ms (7 days), got {self.period_ms} ms")


@dataclass(frozen=True, slots=True)
class Policy:
    debounce_ms: int = 300_000
    hard_window_ms: int = 1_800_000
    max_batch_size: int = 500
    tick_interval_ms: int = 30_000
    max_batch_bytes: int | None = None  # encoded message cap; a claim is split to fit (split.split_to_fit)
    # how the sink counts a message body against ``max_batch_bytes`` (the sink's ``measure_body``):
    # the encoded bytes as they are, or as the sink writes them (SQS escapes some characters)
    measure_body: Callable[[bytes], int] = len
    rate_limit: RateLimit | None = None  # the default of every group; None: unlimited
    ttl_ms: int = 0  # event time-to-live; 0: off (the deployed setting defaults to 6 h)
    rate_overrides: tuple[tuple[str, RateLimit], ...] = ()  # per group, win over ``rate_limit``

    def __post_init__(self) -> None:
        if min(self.debounce_ms, self.hard_window_ms, self.max_batch_size, self.tick_interval_ms) <= 0:
            raise ValueError(f"every policy setting must be positive: {self}")
        if self.max_batch_bytes is not None and self.max_batch_bytes <= 0:
            raise ValueError(f"max_batch_bytes must be positive: {self}")
        if self.ttl_ms < 0:
            raise ValueError(f"ttl_ms must be >= 0 (0 turns it off), got {self.ttl_ms}")

    def limit_for(self, group_key: str) -> RateLimit | None:
        """The group's override, else the default (None: not limited)."""
        for key, limit in self.rate_overrides:
            if key == group_key:
                return limit
        return self.rate_limit


class GroupStats(NamedTuple):
    """What the policy needs to know about one group's PENDING rows."""

    group_key: str
    pending: int
    oldest_first_seen_ms: int
    newest_update_ms: int
    oldest_record_ts_ms: int | None = None  # oldest newest-event record timestamp (TTL); None: unknown


class PendingRow(Protocol):
    first_seen_ms: int
    last_update_ms: int
    record_ts_ms: int | None  # record timestamp of the row's newest event (None: never expires)

    def order_key(self) -> tuple:
        """Claim order: oldest first_seen first, ties broken by source position."""
        ...


R = TypeVar("R", bound=PendingRow)


# -- the due rule, written once: on scalars and, element-wise, on numpy arrays ----------------
#
# A group of ``count`` PENDING rows whose oldest row was first seen at ``oldest_ms`` and whose
# newest update was at ``newest_ms`` is due once it is full, or a hard window past its oldest
# row, or a debounce past its newest update. The scalar callers (:func:`due_reason`,
# :func:`next_due`) and the vectorised ones (``spark/pending.py``, ``spark/columnar.py``: numpy
# arrays of groups or sessions) call these functions; they use only ``+``, ``>=`` and ``|``.

#: An int, or a numpy array of ints: the due rule's functions work on either, element-wise.
Ints = Any


def is_full(count: Ints, policy: Policy) -> Ints:
    """The group holds ``max_batch_size`` rows or more: due at once (reason ``full``)."""
    return count >= policy.max_batch_size


def hard_window_at_ms(oldest_ms: Ints, policy: Policy) -> Ints:
    """When a group whose oldest row was first seen at ``oldest_ms`` reaches its hard window."""
    return oldest_ms + policy.hard_window_ms


def idle_at_ms(newest_ms: Ints, policy: Policy) -> Ints:
    """When a group last updated at ``newest_ms`` has been idle for the debounce."""
    return newest_ms + policy.debounce_ms


def is_due(count: Ints, oldest_ms: Ints, newest_ms: Ints, now_ms: Ints, policy: Policy) -> Ints:
    """The group (``count`` > 0 rows, oldest first seen at ``oldest_ms``, newest update at
    ``newest_ms``) is due at ``now_ms``: full, or past its hard window, or idle for the debounce.
    Scalars give a bool, numpy arrays an array of them."""
    return (is_full(count, policy) | (now_ms >= hard_window_at_ms(oldest_ms, policy))
            | (now_ms >= idle_at_ms(newest_ms, policy)))


def _choose(condition: bool, if_true: int, if_false: int) -> int:
    return if_true if condition else if_false


def due_at_ms(count: Ints, oldest_ms: Ints, newest_ms: Ints, policy: Policy,
              minimum: Callable = min, where: Callable = _choose) -> Ints:
    """The earliest time at which :func:`is_due` holds if nothing else arrives: a full group
    from its newest update on, else its hard window or its idle time, whichever comes first.
    On numpy arrays pass ``minimum=np.minimum, where=np.where``."""
    return where(is_full(count, policy), newest_ms,
                 minimum(hard_window_at_ms(oldest_ms, policy), idle_at_ms(newest_ms, policy)))


def due_reason(stats: GroupStats, now_ms: int, policy: Policy) -> FlushReason | None:
    """Why the group is due at ``now_ms`` (``full`` before ``hard_window`` before ``idle``), or
    None: :func:`is_due`, reason by reason."""
    if stats.pending <= 0:
        return None
    if is_full(stats.pending, policy):
        return FlushReason.FULL
    if now_ms >= hard_window_at_ms(stats.oldest_first_seen_ms, policy):
        return FlushReason.HARD_WINDOW
    if now_ms >= idle_at_ms(stats.newest_update_ms, policy):
        return FlushReason.IDLE
    return None


def due_groups(
    groups: Iterable[GroupStats], now_ms: int, policy: Policy
) -> list[tuple[GroupStats, FlushReason]]:
    """Due groups with their reasons, the group holding the oldest pending row first."""
    due = [(stats, reason) for stats in groups if (reason := due_reason(stats, now_ms, policy))]
    return sorted(due, key=lambda pair: (pair[0].oldest_first_seen_ms, pair[0].group_key))


def stats_of(group_key: str, rows: Sequence[PendingRow]) -> GroupStats:
    return GroupStats(
        group_key=group_key,
        pending=len(rows),
        oldest_first_seen_ms=min((r.first_seen_ms for r in rows), default=0),
        newest_update_ms=max((r.last_update_ms for r in rows), default=0),
    )


def plan_batches(
    group_key: str, rows: Iterable[R], now_ms: int, policy: Policy
) -> tuple[list[tuple[FlushReason, list[R]]], list[R]]:
    """Claims for one group at ``now_ms``: (reason, at most ``max_batch_size`` rows, oldest first)
    while the rows left are due. Returns the claims and the rows that stay pending. Ignores the
    rate limit and the TTL (see :func:`plan_group`)."""
    remaining = sorted(rows, key=lambda r: r.order_key())
    claims: list[tuple[FlushReason, list[R]]] = []
    while remaining and (reason := due_reason(stats_of(group_key, remaining), now_ms, policy)):
        claims.append((reason, remaining[: policy.max_batch_size]))
        remaining = remaining[policy.max_batch_size :]
    return claims, remaining


# -- time-to-live ----------------------------------------------------------------------------


def expires_at_ms(record_ts_ms: int, policy: Policy) -> int:
    """The first time at which a row whose newest event has the record timestamp
    ``record_ts_ms`` is older than the TTL (whether the TTL is on is :func:`is_expired`'s)."""
    return record_ts_ms + policy.ttl_ms + 1


def is_expired(record_ts_ms: int | None, now_ms: int, policy: Policy) -> bool:
    """The row's newest event is older than the TTL at ``now_ms`` (never when the TTL is off)."""
    return bool(policy.ttl_ms) and record_ts_ms is not None and now_ms >= expires_at_ms(record_ts_ms, policy)


def expiry_cutoff_ms(now_ms: int, policy: Policy) -> int | None:
    """Rows with ``record_ts_ms < cutoff`` are expired at ``now_ms`` (None when the TTL is off):
    :func:`is_expired` as a bound for SQL."""
    return now_ms - policy.ttl_ms if policy.ttl_ms else None


# -- rate limit: a sliding-window log of claim times per group ------------------------------


@dataclass(frozen=True, slots=True)
class RateState:
    """One group's recent claim times (ascending, at most ``batches`` of them, inside the
    window) and the time of the first refusal since its last claim."""

    recent_ms: tuple[int, ...] = ()
    throttled_since_ms: int | None = None


def rate_window(recent_ms: Sequence[int], now_ms: int, limit: RateLimit) -> tuple[int, ...]:
    """The claim times still inside the window ``(now - period, now]``, at most ``batches``."""
    inside = [t for t in recent_ms if t > now_ms - limit.period_ms]
    return tuple(sorted(inside)[-limit.batches:])


def rate_time(state: RateState, now_ms: int) -> int:
    """The time a claim at ``now_ms`` counts at: never before the group's latest claim, so a
    flusher whose clock is behind (a paused or slow tick) cannot slip a claim into a window
    that is already full."""
    return max(now_ms, state.recent_ms[-1]) if state.recent_ms else now_ms


def next_allowed_ms(recent_ms: Sequence[int], now_ms: int, limit: RateLimit) -> int:
    """Earliest time >= ``now_ms`` at which one more claim keeps every window of ``period_ms``
    at ``batches`` claims or fewer."""
    window = rate_window(recent_ms, now_ms, limit)
    if len(window) < limit.batches:
        return now_ms
    return window[-limit.batches] + limit.period_ms


def refuse(state: RateState, now_ms: int) -> RateState:
    """The state after a refused claim: the first refusal time is kept."""
    since = now_ms if state.throttled_since_ms is None else state.throttled_since_ms
    return RateState(state.recent_ms, since)


def admit(state: RateState, now_ms: int, limit: RateLimit) -> tuple[RateState, int]:
    """The state after an allowed claim at ``now_ms`` and how long the group was held back."""
    held = 0 if state.throttled_since_ms is None else max(0, now_ms - state.throttled_since_ms)
    return RateState(rate_window((*state.recent_ms, now_ms), now_ms, limit), None), held


# -- one group's plan --------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim(Generic[R]):
    reason: FlushReason
    rows: list[R]
    held_back_ms: int = 0


@dataclass(frozen=True)
class GroupPlan(Generic[R]):
    claims: list[Claim[R]]
    expired: list[R]  # oldest first
    remaining: list[R]  # stay pending
    rate: RateState  # the group's rate state afterwards
    throttled_until_ms: int | None = None  # set when a due group was refused


Split = Callable[[FlushReason, list[R]], Sequence[list[R]]]


def plan_group(
    group_key: str, rows: Iterable[R], now_ms: int, policy: Policy, rate: RateState = RateState(),
    split: Split | None = None,
) -> GroupPlan[R]:
    """Everything one group does at ``now_ms``. When the group is due (on all its pending
    rows), its expired rows leave (:func:`is_expired`); then claims of at most
    ``max_batch_size`` rows, oldest first, while the rest is due. ``split`` cuts a claim into
    consecutive batches (the byte cap and int64 sums: ``spark.buffer.claim_split``; None: one batch
    per claim); each batch is one claim against the rate limit, so the rate may stop a group
    between two batches of one claim (its rows from the refused batch on stay pending)."""
    remaining = sorted(rows, key=lambda r: r.order_key())
    if not remaining or due_reason(stats_of(group_key, remaining), now_ms, policy) is None:
        return GroupPlan([], [], remaining, rate)
    expired = [r for r in remaining if is_expired(r.record_ts_ms, now_ms, policy)]
    if expired:
        remaining = [r for r in remaining if not is_expired(r.record_ts_ms, now_ms, policy)]
    limit = policy.limit_for(group_key)
    claims: list[Claim[R]] = []
    while remaining and (reason := due_reason(stats_of(group_key, remaining), now_ms, policy)):
        claim = remaining[: policy.max_batch_size]
        for batch in ([claim] if split is None else split(reason, claim)):
            held = 0
            if limit is not None:
                at = rate_time(rate, now_ms)
                allowed_at = next_allowed_ms(rate.recent_ms, at, limit)
                if allowed_at > at:
                    rate, until = refuse(rate, at), allowed_at
                    return GroupPlan(claims, expired, remaining, rate, until)
                rate, held = admit(rate, at, limit)
            claims.append(Claim(reason, batch, held))
            remaining = remaining[len(batch):]  # the batches are consecutive runs of the claim
    return GroupPlan(claims, expired, remaining, rate)


def next_due(stats: GroupStats, policy: Policy) -> tuple[FlushReason, int] | None:
    """Why and when the group first becomes due if nothing else arrives (None when empty): the
    time :func:`due_at_ms` gives, with the reason :func:`due_reason` gives at that time (it
    gives None at every earlier one; ``full`` is due from its newest update on, a hard window
    that ends with the idle time wins)."""
    if stats.pending <= 0:
        return None
    if is_full(stats.pending, policy):
        return FlushReason.FULL, stats.newest_update_ms
    hard = hard_window_at_ms(stats.oldest_first_seen_ms, policy)
    idle = idle_at_ms(stats.newest_update_ms, policy)
    return (FlushReason.HARD_WINDOW, hard) if hard <= idle else (FlushReason.IDLE, idle)


def next_due_ms(stats: GroupStats, policy: Policy) -> int | None:
    """Earliest time at which the group becomes due if nothing else arrives (None when empty)."""
    found = next_due(stats, policy)
    return None if found is None else found[1]


def next_tick_ms(at_ms: Ints, policy: Policy) -> Ints:
    """First flush tick at or after ``at_ms`` on the grid of multiples of ``tick_interval``
    (element-wise on a numpy array)."""
    interval = policy.tick_interval_ms
    return -(-at_ms // interval) * interval
