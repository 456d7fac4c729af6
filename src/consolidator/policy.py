"""The flush policy, pure: which groups are due at time ``now``, why, and what a claim takes.

Both engines use it: the MySQL flush evaluates :func:`due_reason` on group statistics
computed in SQL, the Spark jobs call :func:`plan_batches` on rows held in state. Given the
same pending rows and the same ``now`` they produce the same batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple, Protocol, TypeVar


class FlushReason(StrEnum):
    IDLE = "idle"
    HARD_WINDOW = "hard_window"
    FULL = "full"


@dataclass(frozen=True, slots=True)
class Policy:
    debounce_ms: int = 300_000
    hard_window_ms: int = 1_800_000
    max_batch_size: int = 500
    tick_interval_ms: int = 30_000
    max_batch_bytes: int | None = None  # encoded message cap; a claim is split to fit (batch.split_to_fit)

    def __post_init__(self) -> None:
        if min(self.debounce_ms, self.hard_window_ms, self.max_batch_size, self.tick_interval_ms) <= 0:
            raise ValueError(f"every policy setting must be positive: {self}")
        if self.max_batch_bytes is not None and self.max_batch_bytes <= 0:
            raise ValueError(f"max_batch_bytes must be positive: {self}")


class GroupStats(NamedTuple):
    """What the policy needs to know about one group's PENDING rows."""

    group_key: str
    pending: int
    oldest_first_seen_ms: int
    newest_update_ms: int


class PendingRow(Protocol):
    first_seen_ms: int
    last_update_ms: int

    def order_key(self) -> tuple:
        """Claim order: oldest first_seen first, ties broken by source position."""
        ...


R = TypeVar("R", bound=PendingRow)


def due_reason(stats: GroupStats, now_ms: int, policy: Policy) -> FlushReason | None:
    """Why the group is due at ``now_ms`` (``full`` before ``hard_window`` before ``idle``), or None."""
    if stats.pending <= 0:
        return None
    if stats.pending >= policy.max_batch_size:
        return FlushReason.FULL
    if now_ms - stats.oldest_first_seen_ms >= policy.hard_window_ms:
        return FlushReason.HARD_WINDOW
    if now_ms - stats.newest_update_ms >= policy.debounce_ms:
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
    while the rows left are due. Returns the claims and the rows that stay pending."""
    remaining = sorted(rows, key=lambda r: r.order_key())
    claims: list[tuple[FlushReason, list[R]]] = []
    while remaining and (reason := due_reason(stats_of(group_key, remaining), now_ms, policy)):
        claims.append((reason, remaining[: policy.max_batch_size]))
        remaining = remaining[policy.max_batch_size :]
    return claims, remaining


def next_due_ms(stats: GroupStats, policy: Policy) -> int | None:
    """Earliest time at which the group becomes due if nothing else arrives (None when empty)."""
    if stats.pending <= 0:
        return None
    if stats.pending >= policy.max_batch_size:
        return stats.newest_update_ms
    return min(stats.oldest_first_seen_ms + policy.hard_window_ms, stats.newest_update_ms + policy.debounce_ms)


def next_tick_ms(at_ms: int, policy: Policy) -> int:
    """First flush tick at or after ``at_ms`` on the grid of multiples of ``tick_interval``."""
    interval = policy.tick_interval_ms
    return -(-at_ms // interval) * interval
