"""The offsets ledger: what the worker holds of each partition it owns, between the poll loop
(which adds fetched records, pauses and commits) and the writer (which takes a job, writes it
and reports the outcome). One lock guards it; neither side waits on the other's work.

Guarantees:
- **durable before committed**: a partition's committable offset (:attr:`PartitionState.durable`)
  only moves past a record once the write holding it reported it durable (stored, a replay,
  or dead-lettered); :meth:`Ledger.commit_offsets` offers nothing else;
- **a prefix per partition**: one write job at a time; a partition whose write failed at
  offset X keeps X and everything after it, in order, ahead of anything fetched later, and its
  next job starts at X after a backoff; nothing after X is written before X is;
- **memory bound**: the records held are at most ``max_buffered`` plus one fetch (and one record
  a poll while at the bound): there the poll loop waits for room (:meth:`Ledger.wait_for_room`)
  and takes at most one record a poll. It does not pause for this: pausing a partition makes
  the client drop what it had prefetched of it, to fetch it again on the resume;
- **ownership**: each assignment of a partition is a new generation; the outcome of a write for
  a partition revoked (or lost) meanwhile changes nothing, whatever generation owns it now.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from consolidator.rules.events import KafkaRecord
from consolidator.worker.records import Item, item_offset

Partition = tuple[str, int]
BACKOFF_FIRST_S = 0.5  # the first retry of a failed write; doubled per failure in a row ...
BACKOFF_MAX_S = 5.0  # ... up to this
SLOW_WRITE_S = 5.0  # a write in flight this long pauses its partitions until it succeeds


def backoff_seconds(failures: int) -> float:
    """How long a partition waits before its next write after ``failures`` failed ones in a row."""
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** max(0, failures - 1))


@dataclass
class PartitionState:
    generation: int
    pending: deque[Item] = field(default_factory=deque)  # fetched, not in a write yet; offset order
    next_offset: int | None = None  # after the last record fetched: a record below it is a re-delivery
    durable: int | None = None  # the first offset not durable yet: what a commit sends
    committed: int | None = None  # the last offset Kafka confirmed committed by this worker
    in_flight: int = 0  # records of this partition in the writer's job
    retry_at: float = 0.0  # no write before this (monotonic), after a failed one
    failures: int = 0  # failed writes in a row
    paused: bool = False  # as the poll loop last set it on the consumer
    revoking: bool = False  # being revoked: no new write takes its records


@dataclass(frozen=True)
class PartitionView:
    held: int  # records fetched and not durable yet
    first_held: int | None  # the offset of the first of them
    durable: int | None
    committed: int | None
    failures: int
    paused: bool


@dataclass
class WriteJob:
    """Records of one write, per partition in offset order, and the generation each was taken in."""

    items: dict[Partition, list[Item]]
    generations: dict[Partition, int]

    @property
    def size(self) -> int:
        return sum(len(items) for items in self.items.values())


@dataclass
class WriteOutcome:
    """Per partition of a job, the first offset that did not become durable (absent: all did)."""

    failed_from: dict[Partition, int] = field(default_factory=dict)


class Ledger:
    def __init__(self, max_buffered: int, batch_records: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_buffered = max_buffered
        self.batch_records = batch_records
        self._clock = clock
        self._states: dict[Partition, PartitionState] = {}
        self._generation = 0
        self._job: WriteJob | None = None
        self._job_started = 0.0  # monotonic
        self._closed = False
        self._changed = threading.Condition(threading.Lock())
        self._cursor = 0  # where the next job starts taking, round robin over the partitions

    # -- ownership (poll loop, in the rebalance callbacks) ----------------------------------

    def assign(self, partitions: Iterable[Partition]) -> None:
        with self._changed:
            for partition in partitions:
                self._generation += 1
                self._states[partition] = PartitionState(self._generation)

    def drop(self, partitions: Iterable[Partition]) -> int:
        """Forget ``partitions`` (revoked or lost): their held records are dropped (Kafka delivers
        them again to the next owner) and the outcome of a write in flight for them is ignored.
        Returns how many records were dropped."""
        dropped = 0
        with self._changed:
            for partition in partitions:
                state = self._states.pop(partition, None)
                if state is not None:
                    dropped += len(state.pending) + state.in_flight
            self._changed.notify_all()
        return dropped

    def assigned(self) -> list[Partition]:
        with self._changed:
            return sorted(self._states)

    def settle(self, partitions: Iterable[Partition], timeout_s: float) -> bool:
        """For a revoke: no new write takes records of ``partitions``, and wait until no write in
        flight holds any of them; False at the timeout (that write is then abandoned: its outcome
        will be ignored once the partitions are dropped)."""
        wanted = set(partitions)
        deadline = time.monotonic() + timeout_s  # waits are in real time; the clock decides backoffs
        with self._changed:
            for partition in wanted:
                if partition in self._states:
                    self._states[partition].revoking = True
            while self._job is not None and wanted & self._job.items.keys():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    # -- records (poll loop) ----------------------------------------------------------------

    def add(self, items: Iterable[Item]) -> int:
        """Hold fetched records for writing; a record of a partition not owned, or below what was
        fetched already (a re-delivery after a pause), is skipped. Returns how many were added."""
        added = 0
        with self._changed:
            states = self._states
            partition, state = None, None
            for item in items:  # a fetch holds runs of one partition: its state is looked up once a run
                if type(item) is KafkaRecord:
                    topic, number, offset = item.topic, item.partition, item.offset
                else:
                    topic, number, offset = item.position
                if partition is None or number != partition[1] or topic != partition[0]:
                    partition = (topic, number)
                    state = states.get(partition)
                if state is None or (state.next_offset is not None and offset < state.next_offset):
                    continue
                state.pending.append(item)
                state.next_offset = offset + 1
                added += 1
            if added:
                self._changed.notify_all()
        return added

    def buffered(self) -> int:
        with self._changed:
            return self._buffered()

    def _buffered(self) -> int:
        return sum(len(s.pending) + s.in_flight for s in self._states.values())

    def wait_for_room(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until fewer than ``max_buffered`` records are held; whether
        there is room now."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._buffered() >= self.max_buffered:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def pause_plan(self) -> tuple[list[Partition], list[Partition]]:
        """(to pause, to resume) on the consumer now, marked as done: a partition whose last write
        failed, or whose write has been in flight for :data:`SLOW_WRITE_S`, stays paused until a
        write of it succeeds; the others are resumed."""
        now = self._clock()
        with self._changed:
            slow = (self._job.items.keys() if self._job is not None and now - self._job_started >= SLOW_WRITE_S
                    else ())
            pause, resume = [], []
            for partition, state in self._states.items():
                want = state.failures > 0 or partition in slow
                if want and not state.paused:
                    pause.append(partition)
                elif not want and state.paused:
                    resume.append(partition)
                state.paused = want
            return pause, resume

    def paused(self) -> list[Partition]:
        with self._changed:
            return sorted(p for p, s in self._states.items() if s.paused)

    # -- offsets (poll loop) ----------------------------------------------------------------

    def commit_offsets(self, partitions: Iterable[Partition] | None = None) -> dict[Partition, int]:
        """The durable offsets not committed yet, of ``partitions`` (default: all owned)."""
        with self._changed:
            chosen = self._states if partitions is None else {p: self._states[p] for p in partitions
                                                              if p in self._states}
            return {p: s.durable for p, s in chosen.items()
                    if s.durable is not None and (s.committed is None or s.durable > s.committed)}

    def committed(self, offsets: dict[Partition, int]) -> None:
        """Kafka confirmed these commits."""
        with self._changed:
            for partition, offset in offsets.items():
                state = self._states.get(partition)
                if state is not None and (state.committed is None or offset > state.committed):
                    state.committed = offset

    def positions(self) -> dict[Partition, int | None]:
        """Per owned partition, the first offset not durable yet (None: nothing written yet)."""
        with self._changed:
            return {p: s.durable for p, s in self._states.items()}

    # -- jobs (writer) ----------------------------------------------------------------------

    def close(self) -> None:
        """No new job from now on (shutdown); the job in flight may still complete."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def next_job(self, timeout_s: float) -> WriteJob | None:
        """The next write: up to ``batch_records`` held records, round robin over the partitions
        that may write now, each in offset order. Waits up to ``timeout_s`` for one; None when
        there is none or the ledger is closed."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                if self._closed:
                    return None
                job = self._take()
                if job is not None:
                    self._job, self._job_started = job, self._clock()
                    return job
                now = self._clock()
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                waits = [s.retry_at - now for s in self._states.values()
                         if s.pending and s.retry_at > now and not s.revoking]
                self._changed.wait(min([left, *waits]))

    def _take(self) -> WriteJob | None:
        now = self._clock()
        ready = [p for p, s in self._states.items() if s.pending and s.retry_at <= now and not s.revoking]
        if not ready:
            return None
        ready.sort()
        start = self._cursor % len(ready)
        self._cursor += 1
        ordered = ready[start:] + ready[:start]
        room = self.batch_records
        share = max(1, room // len(ordered))
        items: dict[Partition, list[Item]] = {}
        for round_share in (share, room):  # an even share first, then what the others left
            for partition in ordered:
                if room <= 0:
                    break
                state = self._states[partition]
                count = min(round_share, room, len(state.pending))
                if count:
                    taken = items.setdefault(partition, [])
                    taken += [state.pending.popleft() for _ in range(count)]
                    state.in_flight += count
                    room -= count
        return WriteJob(items, {p: self._states[p].generation for p in items})

    def complete(self, job: WriteJob, outcome: WriteOutcome) -> list[Partition]:
        """Record the outcome of ``job``: durable records move their partition's committable
        offset; the rest of a failed partition goes back ahead of what was fetched since, and
        waits a backoff. Partitions no longer owned in the job's generation are left alone.
        Returns the partitions whose write failed."""
        failed = []
        now = self._clock()
        with self._changed:
            for partition, items in job.items.items():
                state = self._states.get(partition)
                if state is None or state.generation != job.generations[partition]:
                    continue
                state.in_flight -= len(items)
                cut = outcome.failed_from.get(partition)
                if cut is None:
                    state.durable = item_offset(items[-1]) + 1
                    state.failures = 0
                    state.retry_at = 0.0
                    continue
                kept = [i for i in items if item_offset(i) >= cut]
                if len(kept) < len(items):
                    state.durable = cut
                state.pending.extendleft(reversed(kept))
                state.failures += 1
                state.retry_at = now + backoff_seconds(state.failures)
                failed.append(partition)
            self._job = None
            self._changed.notify_all()
        return failed

    def snapshot(self) -> dict[Partition, PartitionView]:
        """What each owned partition looks like now (metrics, health)."""
        with self._changed:
            in_flight = self._job.items if self._job is not None else {}
            views = {}
            for p, s in self._states.items():
                first = in_flight[p][0] if s.in_flight and p in in_flight else s.pending[0] if s.pending else None
                views[p] = PartitionView(len(s.pending) + s.in_flight, None if first is None else item_offset(first),
                                         s.durable, s.committed, s.failures, s.paused)
            return views
