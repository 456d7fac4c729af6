"""One flusher across the fleet: every worker ticks on the schedule, the Redis lock lets one tick
run at a time; a tick that loses its lock claims nothing more; ``--role`` splits the work."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
import redis
from support import REDIS_URL, record, sql
from worker_support import durable_positions, running, wait_for

from consolidator.rules.clock import ManualClock
from consolidator.rules.events import FieldNames, decode
from consolidator.rules.policy import Policy
from consolidator.services.flush import FlushService
from consolidator.sinks import OutgoingBatch
from consolidator.sinks.deadletter import FileDeadLetter
from consolidator.sinks.file import FileSink
from consolidator.store.lock import RedisLock
from consolidator.worker.runtime import build_worker

POLICY = Policy(debounce_ms=1000, hard_window_ms=60_000, max_batch_size=50, tick_interval_ms=1000)


def pending_groups(store, count: int, clock: ManualClock) -> None:
    events = [decode(record(n, location=f"WH-{n}", order=f"O{n}", key=f"WH-{n}".encode()), FieldNames(), 2**18)
              for n in range(count)]
    store.ingest(events, clock.now_ms())
    clock.advance(POLICY.debounce_ms)


class LosingSink:
    """A file sink whose first publish happens while the tick's lock is lost (``lose`` runs then)."""

    def __init__(self, path: Path, lose) -> None:
        self.file, self.lose, self.calls = FileSink(path), lose, 0
        self.max_message_bytes = self.file.max_message_bytes

    def publish(self, batches: Sequence[OutgoingBatch]) -> dict[int, str]:
        self.calls += 1
        if self.calls == 1:
            self.lose()
        return self.file.publish(batches)


@pytest.mark.parametrize("how", ["taken-by-another", "ttl-over"])
def test_a_tick_that_loses_its_lock_claims_nothing_more(how, store, clock, tmp_path: Path):
    client = redis.Redis.from_url(REDIS_URL)
    key = f"test-worker-lock:{uuid.uuid4().hex}"
    lock = RedisLock(client, ttl_ms=400 if how == "ttl-over" else 30_000, key=key)

    def lose() -> None:
        if how == "taken-by-another":
            client.set(key, "another flusher's token")
        else:
            time.sleep(0.45)  # past the TTL: another flusher may hold it now

    pending_groups(store, 5, clock)
    metrics = _Metrics()
    service = FlushService(store=store, sink=LosingSink(tmp_path / "out.jsonl", lose),
                           dead_letter=FileDeadLetter(tmp_path / "dead.jsonl"), policy=POLICY, clock=clock,
                           lock=lock, publish_chunk=1, metrics=metrics)
    report = service.tick()
    assert report.lock_lost and len(report.published) == 1, report
    states = sql(store, "SELECT status, COUNT(*) AS n FROM buffer_rows GROUP BY status ORDER BY status")
    assert states == [{"status": "PENDING", "n": 4}, {"status": "CLAIMED", "n": 1}], \
        "the four other groups were not claimed"
    assert metrics.values.get("FlushLockLost") == [1]
    client.delete(key)


class _Metrics:
    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}

    def add_metric(self, name: str, unit: str, value: float) -> None:
        self.values.setdefault(name, []).append(value)


def test_workers_on_one_lock_run_one_flush_tick_at_a_time(kafka, topic, worker_env, store, tmp_path: Path):
    """Two workers tick every 0.1 s; each tick that holds the lock works for at least 0.25 s.
    Without the lock their work would overlap all the time; with it, never (the holder may well
    take every tick: whichever worker asks first after a release gets it). The work is timed
    where it runs, under the lock: a tick's call starts before it waits for the lock and returns
    after the release, so two calls may overlap by the hand-over."""
    env = {**worker_env, "CONSOLIDATOR_TICK_INTERVAL_SECONDS": "0.1", "CONSOLIDATOR_DEBOUNCE_SECONDS": "0.2"}
    ticks: list[tuple[str, bool]] = []
    work: list[tuple[float, float, str]] = []
    guard = threading.Lock()

    def build(name: str):
        def make(settings):
            worker = build_worker(settings, "flush")
            service = worker.flusher.service
            stats = service.store.pending_group_stats
            tick = service.tick

            def slow_stats(*args):
                started = time.monotonic()
                time.sleep(0.25)  # inside the tick, under the lock
                result = stats(*args)
                with guard:
                    work.append((started, time.monotonic(), name))
                return result

            def recorded_tick(remaining_ms=None):
                report = tick(remaining_ms)
                with guard:
                    ticks.append((name, report.skipped is None))
                return report

            service.store.pending_group_stats = slow_stats
            service.tick = recorded_tick
            return worker
        return make

    kafka.produce(topic, 0, 20)
    with running(env, role="ingest"), running(env, "flush", build("a")), running(env, "flush", build("b")):
        wait_for(lambda: len(durable_positions(store, tmp_path / "dead.jsonl")) == 20, 20, "20 rows")
        wait_for(lambda: sql(store, "SELECT COUNT(*) AS n FROM buffer_rows WHERE status = 'PENDING'")[0]["n"] == 0,
                 20, "every row flushed")
        time.sleep(1)
    worked = sorted(work)
    assert {name for name, _ in ticks} == {"a", "b"} and len(worked) >= 2, "both workers ticked"
    assert any(not held for _, held in ticks), "ticks were skipped while the other held the lock"
    for (_, end, first), (start, _, second) in itertools.pairwise(worked):
        assert start >= end, f"the work of {first} and {second} overlapped"


def test_role_ingest_needs_no_sink_or_redis_and_role_flush_needs_no_kafka(kafka, topic, worker_env, store,
                                                                        tmp_path: Path):
    kafka.produce(topic, 0, 10)
    ingest_only = {k: v for k, v in worker_env.items() if k not in ("CONSOLIDATOR_SINK_URL", "CONSOLIDATOR_REDIS_URL")}
    with running(ingest_only, role="ingest") as worker:
        assert worker.flusher is None
        wait_for(lambda: len(durable_positions(store, tmp_path / "dead.jsonl")) == 10, 20, "10 rows")
        time.sleep(1.5)  # past the debounce: a flusher would have published
    assert not (tmp_path / "out.jsonl").exists(), "role ingest flushes nothing"
    flush_only = {k: v for k, v in worker_env.items() if "KAFKA" not in k and k != "CONSOLIDATOR_SOURCE_TOPICS"}
    with running(flush_only, role="flush") as worker:
        assert worker.poll is None and worker.writer is None
        wait_for(lambda: (tmp_path / "out.jsonl").exists()
                 and len((tmp_path / "out.jsonl").read_text().splitlines()) == 5, 10, "the five groups published")
