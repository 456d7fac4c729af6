"""Commit only what is durable: the worker commits a partition's offset only past records stored
(or replays, or dead-lettered), on an interval, on a revoke (after the revoked partition's write)
and at shutdown; never for a lost partition; poison never blocks a partition."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import TopicPartition
from support import record
from worker_support import (
    assert_committed_durable,
    assigned,
    durable_positions,
    running,
    wait_for,
)

from consolidator.worker.consumer import FETCH_MAX, ConsumerPlan, PollLoop
from consolidator.worker.ledger import Ledger, WriteOutcome
from consolidator.worker.metrics import PrometheusRegistry


def test_committed_offsets_cover_only_durable_records_and_reach_the_end(kafka, topic, worker_env, store,
                                                                         tmp_path: Path):
    kafka.produce(topic, 0, 400)
    with running(worker_env, role="ingest") as worker:
        wait_for(assigned(worker, 4), 10, "the assignment")
        wait_for(lambda: len(durable_positions(store, tmp_path / "dead.jsonl")) == 400, 20, "400 rows")
        kafka.produce(topic, 400, 100)
        ends = {p: end for p, end in kafka.high_watermarks(topic).items() if end}
        group = worker_env["CONSOLIDATOR_KAFKA_GROUP_ID"]
        wait_for(lambda: kafka.committed(group, topic) == ends, 20, "the interval commits to reach the end")
    assert_committed_durable(kafka, group, topic, store, tmp_path / "dead.jsonl")
    assert worker.metrics.value("OffsetsCommitted") >= 4


def test_poison_is_dead_lettered_and_committed_past_without_blocking_its_partition(kafka, topic, worker_env,
                                                                                   store, tmp_path: Path):
    kafka.produce(topic, 0, 30, partition=0, values=lambda n: b"{not json" if n == 7 else None)
    kafka.produce(topic, 30, 10, partition=0)
    with running(worker_env, role="ingest") as worker:
        group = worker_env["CONSOLIDATOR_KAFKA_GROUP_ID"]
        wait_for(lambda: kafka.committed(group, topic).get(0) == 40, 20, "partition 0 committed to its end")
    entries = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert [(e["reason"], e["source"]["offset"]) for e in entries] == [("not_json", 7)]
    assert_committed_durable(kafka, group, topic, store, tmp_path / "dead.jsonl")
    assert worker.metrics.value("RecordsDeadLettered") == 1


def test_a_record_that_cannot_be_dead_lettered_holds_its_partition_at_its_offset(kafka, topic, worker_env, store,
                                                                                 tmp_path: Path, caplog):
    """The dead-letter destination refuses the poison at offset 7 of partition 0: the records
    before it are committed, nothing at or after it; the other partitions go on."""
    blocked = tmp_path / "a-directory"  # the file destination cannot append to it
    blocked.mkdir()
    env = {**worker_env, "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{blocked}"}
    kafka.produce(topic, 0, 20, partition=0, values=lambda n: b"{not json" if n == 7 else None)
    kafka.produce(topic, 20, 20, partition=1)
    group = env["CONSOLIDATOR_KAFKA_GROUP_ID"]
    caplog.set_level(logging.INFO, logger="consolidator.worker.consumer")
    with running(env, role="ingest") as worker:
        wait_for(lambda: kafka.committed(group, topic).get(1) == 20, 20, "partition 1 committed to its end")
        wait_for(lambda: kafka.committed(group, topic).get(0) == 7, 20, "partition 0 committed up to the poison")
        wait_for(lambda: (topic, 0) in worker.poll.ledger.paused(), 10, "partition 0 paused")
    assert kafka.committed(group, topic)[0] == 7
    commits = [o for r in caplog.records if r.getMessage() == "offsets committed" for o in r.offsets]
    assert max(o["offset"] for o in commits if o["partition"] == 0) == 7, "never past the record not durable"
    stored = durable_positions(store, tmp_path / "nothing-dead-lettered.jsonl")
    assert {(topic, 0, o) for o in range(7)} <= stored and not {(topic, 0, o) for o in range(7, 20)} & stored


class _RecordingConsumer:
    """The Kafka client's surface the rebalance callbacks use, recording what they do."""

    def __init__(self) -> None:
        self.commits: list[list[TopicPartition]] = []

    def commit(self, offsets, asynchronous):
        self.commits.append(offsets)
        return [TopicPartition(tp.topic, tp.partition, tp.offset) for tp in offsets]


def test_a_lost_partition_is_never_committed_a_revoked_one_is():
    ledger = Ledger(1000, 100)
    loop = PollLoop(ConsumerPlan({}, ["orders"], None, True, 5, 1), ledger, PrometheusRegistry())
    consumer = loop.consumer = _RecordingConsumer()
    ledger.assign([("orders", 0), ("orders", 1)])
    ledger.add([record(o, partition=p) for p in (0, 1) for o in range(5)])
    ledger.complete(ledger.next_job(0), WriteOutcome())
    loop._on_lost(consumer, [TopicPartition("orders", 0)])
    assert consumer.commits == [], "nothing is committed for a lost partition"
    loop._on_revoke(consumer, [TopicPartition("orders", 1)])
    assert [[(tp.partition, tp.offset) for tp in c] for c in consumer.commits] == [[(1, 5)]]
    assert ledger.assigned() == []


def test_partitions_revoked_by_a_joining_worker_are_committed_before_they_move(kafka, topic, worker_env, store,
                                                                               tmp_path: Path, caplog):
    env = {**worker_env, "CONSOLIDATOR_WORKER_COMMIT_INTERVAL_SECONDS": "300"}  # no interval commit here
    kafka.produce(topic, 0, 200)
    group = env["CONSOLIDATOR_KAFKA_GROUP_ID"]
    caplog.set_level(logging.INFO, logger="consolidator.worker.consumer")
    with running(env, role="ingest") as first:
        wait_for(lambda: len(durable_positions(store, tmp_path / "dead.jsonl")) == 200, 20, "200 rows")
        assert kafka.committed(group, topic) == {}
        with running(env, role="ingest") as second:
            wait_for(lambda: second.poll.ledger.assigned(), 20, "the second worker's assignment")
            moved = [p for _, p in second.poll.ledger.assigned()]
            revoked = [p for kind, parts in first.poll.rebalances if kind == "revoked" for _, p in parts]
            assert sorted(moved) == sorted(revoked)
            ends = kafka.high_watermarks(topic)
            assert {p: o for p, o in kafka.committed(group, topic).items() if p in moved} == {
                p: ends[p] for p in moved if ends[p]}
    commits = [r for r in caplog.records if r.getMessage() == "offsets committed"]
    assert {r.reason for r in commits} == {"revoke", "shutdown"}
    assert not [kind for kind, _ in first.poll.rebalances + second.poll.rebalances if kind == "lost"]
    assert_committed_durable(kafka, group, topic, store, tmp_path / "dead.jsonl")


class _FetchingConsumer:
    """The client's surface the poll loop's iterations use: no records to give, calls recorded."""

    def __init__(self, stop_after: int, stop: Callable[[], None]) -> None:
        self.asked: list[int] = []
        self.paused: list[list[TopicPartition]] = []
        self._stop_after, self._stop = stop_after, stop

    def consume(self, num_messages, timeout):
        self.asked.append(num_messages)
        if len(self.asked) >= self._stop_after:
            self._stop()
        return []

    def pause(self, partitions):
        self.paused.append(partitions)

    def resume(self, partitions):
        raise AssertionError("nothing was paused")


def test_at_the_memory_bound_the_loop_keeps_polling_for_one_record_and_pauses_nothing():
    """A pause would make the client drop what it prefetched of the partitions, to fetch it again."""
    from consolidator.services.metrics import NoMetrics

    ledger = Ledger(10, 5)
    loop = PollLoop(ConsumerPlan({}, ["orders"], None, True, 300, 1), ledger, NoMetrics())
    ledger.assign([("orders", 0), ("orders", 1)])
    ledger.add([record(o, partition=p) for p in (0, 1) for o in range(5)])
    consumer = _FetchingConsumer(3, loop._stop.set)
    loop._loop(consumer)
    assert consumer.asked == [1, 1, 1] and consumer.paused == []
    ledger.complete(ledger.next_job(0), WriteOutcome())  # room again: full fetches
    consumer = _FetchingConsumer(1, loop._stop.set)
    loop._stop.clear()
    loop._loop(consumer)
    assert consumer.asked == [FETCH_MAX]
