"""The worker's offsets ledger on its own: what becomes committable, what a failed write keeps,
what a revoked partition's late outcome changes (nothing), when partitions pause and resume."""

from __future__ import annotations

import threading

from support import record

from consolidator.worker.ledger import SLOW_WRITE_S, Ledger, WriteOutcome, backoff_seconds

P0, P1 = ("orders", 0), ("orders", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def records(partition: int, first: int, count: int):
    return [record(o, partition=partition) for o in range(first, first + count)]


def ledger(max_buffered: int = 1000, batch: int = 100, clock=None) -> Ledger:
    led = Ledger(max_buffered, batch, clock or Clock())
    led.assign([P0, P1])
    return led


def test_nothing_is_committable_before_its_write_reported_it_durable():
    led = ledger()
    led.add(records(0, 0, 10) + records(1, 0, 5))
    assert led.commit_offsets() == {}
    job = led.next_job(0)
    assert job.items[P0][0].offset == 0 and len(job.items[P0]) == 10 and len(job.items[P1]) == 5
    assert led.commit_offsets() == {}, "taken by a write is not durable yet"
    led.complete(job, WriteOutcome())
    assert led.commit_offsets() == {P0: 10, P1: 5}
    led.committed({P0: 10})
    assert led.commit_offsets() == {P1: 5}


def test_a_failed_partition_keeps_its_records_in_order_ahead_of_later_ones_and_waits():
    clock = Clock()
    led = ledger(clock=clock)
    led.add(records(0, 0, 10) + records(1, 0, 4))
    job = led.next_job(0)
    led.add(records(0, 10, 3))  # fetched while the write ran
    assert led.complete(job, WriteOutcome({P0: 6})) == [P0]
    assert led.commit_offsets() == {P0: 6, P1: 4}, "the prefix before the failure is durable"
    led.add(records(1, 4, 2))
    other = led.next_job(0)
    assert list(other.items) == [P1], "the failed partition waits its backoff; the others go on"
    led.complete(other, WriteOutcome())
    clock.now += backoff_seconds(1)
    again = led.next_job(0)
    assert [r.offset for r in again.items[P0]] == list(range(6, 13)), "the rest, then what came later, in order"
    led.complete(again, WriteOutcome())
    assert led.commit_offsets()[P0] == 13


def test_a_partition_whose_write_failed_is_paused_until_a_write_of_it_succeeds():
    clock = Clock()
    led = ledger(clock=clock)
    led.add(records(0, 0, 5))
    led.complete(led.next_job(0), WriteOutcome({P0: 0}))
    assert led.pause_plan() == ([P0], [])
    clock.now += 60
    assert led.pause_plan() == ([], []), "still paused after its backoff: the retry has not succeeded yet"
    led.complete(led.next_job(0), WriteOutcome({P0: 0}))
    assert led.pause_plan() == ([], [])
    clock.now += 60
    led.complete(led.next_job(0), WriteOutcome())
    assert led.pause_plan() == ([], [P0])


def test_a_write_in_flight_for_long_pauses_its_partitions_until_it_completes():
    clock = Clock()
    led = ledger(clock=clock)
    led.add(records(0, 0, 5))
    job = led.next_job(0)
    assert led.pause_plan() == ([], [])
    clock.now += SLOW_WRITE_S
    assert led.pause_plan() == ([P0], [])
    led.complete(job, WriteOutcome())
    assert led.pause_plan() == ([], [P0])


def test_at_the_memory_bound_nothing_pauses_and_the_loop_waits_for_room_a_write_makes():
    """Pausing would make the client drop what it prefetched of the partition and fetch it again."""
    led = ledger(max_buffered=100, batch=60)
    led.add(records(0, 0, 60) + records(1, 0, 40))
    assert led.pause_plan() == ([], [])
    assert not led.wait_for_room(0.01)
    job = led.next_job(0)
    assert job.size == 60 and not led.wait_for_room(0.01), "records in the write are still held"
    threading.Timer(0.05, led.complete, (job, WriteOutcome())).start()
    assert led.wait_for_room(5), "the write's completion makes room"
    assert led.pause_plan() == ([], [])


def test_the_late_outcome_of_an_abandoned_write_changes_nothing_for_the_next_owner():
    led = ledger()
    led.add(records(0, 0, 10))
    job = led.next_job(0)
    assert not led.settle([P0], 0.05), "the write is still in flight"
    led.drop([P0])
    led.assign([P0])  # the partition comes back: a new generation
    led.complete(job, WriteOutcome())
    assert led.commit_offsets() == {}, "the old generation's write does not make the new one's offsets"


def test_settle_waits_for_the_write_and_stops_new_ones_taking_the_partition():
    led = ledger()
    led.add(records(0, 0, 10))
    job = led.next_job(0)
    led.add(records(0, 10, 5))
    threading.Timer(0.1, lambda: led.complete(job, WriteOutcome())).start()
    assert led.settle([P0], 5)
    assert led.next_job(0) is None, "a partition being revoked is not written again"
    assert led.commit_offsets([P0]) == {P0: 10}


def test_records_of_a_partition_not_owned_or_fetched_again_are_skipped():
    led = ledger()
    assert led.add(records(0, 0, 3)) == 3
    assert led.add(records(0, 1, 3)) == 1, "offsets 1 and 2 are held already"
    assert led.add(records(2, 0, 3)) == 0, "partition 2 is not owned"
    led.drop([P0])
    assert led.buffered() == 0


def test_records_of_interleaved_partitions_and_topics_each_go_to_their_own_partition():
    from consolidator.rules.events import PoisonReason, Rejected, SourcePosition
    from consolidator.worker.records import item_offset

    led = ledger()
    unreadable = Rejected(PoisonReason.BAD_ENVELOPE, "timestamp not available", {}, SourcePosition("orders", 1, 1))
    fetched = [record(0, partition=0), record(0, partition=1), record(1, partition=0), unreadable,
               record(5, topic="other", partition=0), record(2, partition=0), record(1, partition=1)]
    assert led.add(fetched) == 5, "the other topic's partition 0 is not owned; offset 1 of partition 1 came already"
    job = led.next_job(0)
    assert {p: [item_offset(i) for i in items] for p, items in job.items.items()} == {P0: [0, 1, 2], P1: [0, 1]}
    assert job.items[P1][1] is unreadable
