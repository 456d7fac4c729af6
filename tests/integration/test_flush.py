"""Flush service against real MariaDB and Redis: claims, batches, reasons, bounds, the lock.

Also holds the helpers the other flush tests import (ingest, service factory, invariants).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import jsonschema
import pytest
import redis
from support import REDIS_URL, ROWS, STATE, record, sql

from consolidator.rules.batch import load_schema
from consolidator.rules.clock import ManualClock
from consolidator.rules.events import FieldNames, KafkaRecord, decode
from consolidator.rules.policy import FlushReason, Policy, plan_batches
from consolidator.services.flush import FlushService
from consolidator.sinks import OutgoingBatch
from consolidator.sinks.deadletter import FileDeadLetter
from consolidator.sinks.file import FileSink
from consolidator.store.lock import RedisLock
from consolidator.store.mysql import MySQLStore

POLICY = Policy(debounce_ms=300_000, hard_window_ms=1_800_000, max_batch_size=50, tick_interval_ms=30_000)
VALIDATOR = jsonschema.Draft202012Validator(load_schema(), format_checker=jsonschema.FormatChecker())


# -- helpers shared by the flush tests ---------------------------------------------------------

def ingest(store: MySQLStore, clock: ManualClock, records: Iterable[KafkaRecord]) -> int:
    """Decode and store records at the clock's current time; returns how many were stored."""
    events = [decode(r, FieldNames(), 256 * 1024) for r in records]
    return store.ingest(events, clock.now_ms()).stored if events else 0


def orders(n: int, *, groups: int = 5, start: int = 0, partition: int = 0, items_per_group: int | None = None):
    """``n`` order records spread over ``groups`` locations; order ids repeat every
    ``items_per_group`` per group (coalescing) when given."""
    out = []
    for i in range(start, start + n):
        group = f"WH-{i % groups}"
        order = f"O{(i // groups) % items_per_group if items_per_group else i}"
        out.append(record(i, partition=partition, location=group, order=order, key=group.encode(),
                          items=((f"SKU-{i % 3}", 1 + i % 4),)))
    return out


class RecordingSink:
    """A real file sink that can be switched off (every publish fails) and keeps every message."""

    def __init__(self, path: Path) -> None:
        self.file = FileSink(path)
        self.down = False
        self.calls = 0

    def publish(self, batches: Sequence[OutgoingBatch]) -> dict[int, str]:
        self.calls += 1
        if self.down:
            return {i: "sink down (test)" for i in range(len(batches))}
        return self.file.publish(batches)

    def close(self) -> None:
        pass

    def messages(self) -> list[dict]:
        return self.file.read()


def make_service(store, sink, clock, tmp_path: Path, policy: Policy = POLICY, **kwargs) -> FlushService:
    return FlushService(store=store, sink=sink, dead_letter=FileDeadLetter(tmp_path / "dead.jsonl"),
                        policy=policy, clock=clock, **kwargs)


def assert_invariants(store: MySQLStore, messages: list[dict], ingested_events: int,
                      dead: Sequence[dict] = ()) -> dict[str, dict]:
    """L, D, B and S over everything published (and dead-lettered). Returns messages by batch id."""
    by_id: dict[str, dict] = {}
    for message in messages:
        VALIDATOR.validate(message)
        first = by_id.setdefault(message["batch_id"], message)
        assert first == message, "a re-publish changed the batch"  # same id, same content
    for entry in dead:
        first = by_id.setdefault(entry["batch"]["batch_id"], entry["batch"])
        assert first == entry["batch"]
    owner: dict[tuple, str] = {}
    for bid, message in by_id.items():
        for m in message["members"]:
            position = (m["topic"], m["partition"], m["offset"])
            assert owner.setdefault(position, bid) == bid, f"D violated: {position} under two batch ids"
    rows = sql(store, f"SELECT {STATE} AS status, r.batch_id, src_topic, src_partition, src_offset FROM {ROWS}")
    assert [r for r in rows if r["status"] in ("PENDING", "CLAIMED")] == [], "S: rows left unsent"
    for r in rows:  # B: every row's batch id is the one whose message lists it
        assert owner[(r["src_topic"], r["src_partition"], r["src_offset"])] == r["batch_id"]
    assert len(owner) == len(rows), "L: a published member is not a stored row"
    assert sum(m["event_count"] for m in by_id.values()) == ingested_events, "L: events lost or doubled"
    return by_id


# -- tests -------------------------------------------------------------------------------------

def test_idle_group_becomes_one_schema_valid_batch_and_rows_are_sent(store, clock, tmp_path):
    assert ingest(store, clock, orders(6, groups=2)) == 6
    sink = RecordingSink(tmp_path / "out.jsonl")
    service = make_service(store, sink, clock, tmp_path)
    clock.advance(POLICY.debounce_ms - 1)
    assert service.due() == [] and service.tick().published == []
    clock.advance(1)
    assert [(s.group_key, r) for s, r in service.due()] == [("WH-0", FlushReason.IDLE), ("WH-1", FlushReason.IDLE)]
    report = service.tick()
    assert report.skipped is None and report.dead == 0 and report.publish_failures == 0
    assert sorted((p.group_key, p.reason, p.size, p.attempt) for p in report.published) == [
        ("WH-0", FlushReason.IDLE, 3, 1), ("WH-1", FlushReason.IDLE, 3, 1)]
    messages = sink.messages()
    assert_invariants(store, messages, 6)
    wh0 = next(m for m in messages if m["group_key"] == "WH-0")
    assert wh0["item_ids"] == ["O0", "O2", "O4"] and wh0["event_count"] == 3
    assert wh0["flushed_at"] == "2026-11-18T11:11:40.000Z"
    assert store.batch_counts() == {"SENT": 2}
    assert service.tick().published == []  # nothing left


def test_claims_follow_plan_batches_several_full_batches_oldest_first(store, clock, tmp_path):
    recs = orders(130, groups=1)
    for i in range(0, 130, 10):  # ten records per second: distinct first-seen times
        ingest(store, clock, recs[i:i + 10])
        clock.advance(1000)
    planned_rows = sql(store, "SELECT src_offset, first_seen_ms, last_update_ms, pos_key FROM buffer_rows")

    class Row:
        def __init__(self, r):
            self.offset, self.first_seen_ms, self.last_update_ms, self.pos = (
                r["src_offset"], r["first_seen_ms"], r["last_update_ms"], bytes(r["pos_key"]))

        def order_key(self):
            return (self.first_seen_ms, self.pos)

    claims, left = plan_batches("WH-0", [Row(r) for r in planned_rows], clock.now_ms(), POLICY)
    sink = RecordingSink(tmp_path / "out.jsonl")
    report = make_service(store, sink, clock, tmp_path).tick()
    assert [(p.reason, p.size) for p in report.published] == [(r, len(rows)) for r, rows in claims] == [
        (FlushReason.FULL, 50), (FlushReason.FULL, 50)]
    assert [[m["offset"] for m in msg["members"]] for msg in sink.messages()] == [
        sorted(r.offset for r in rows) for _, rows in claims]
    assert len(left) == 30 and store.row_counts() == {"PENDING": 30, "SENT": 100}
    clock.advance(POLICY.debounce_ms)
    assert [(p.reason, p.size) for p in make_service(store, sink, clock, tmp_path).tick().published] == [
        (FlushReason.IDLE, 30)]
    assert_invariants(store, sink.messages(), 130)


def test_rows_per_tick_bound_leaves_the_rest_for_the_next_tick(store, clock, tmp_path):
    ingest(store, clock, orders(200, groups=1))
    sink = RecordingSink(tmp_path / "out.jsonl")
    service = make_service(store, sink, clock, tmp_path, max_rows_per_tick=100)
    assert [p.size for p in service.tick().published] == [50, 50]
    assert store.row_counts() == {"PENDING": 100, "SENT": 100}
    assert [p.size for p in service.tick().published] == [50, 50]
    assert_invariants(store, sink.messages(), 200)


def test_time_bound_stops_claiming_when_the_invocation_runs_out(store, clock, tmp_path):
    ingest(store, clock, orders(200, groups=1))
    sink = RecordingSink(tmp_path / "out.jsonl")
    service = make_service(store, sink, clock, tmp_path, publish_chunk=1)
    budget = iter([60_000, 60_000, 1_000] + [1_000] * 100)
    report = service.tick(remaining_ms=lambda: next(budget))
    assert [p.size for p in report.published] == [50, 50]
    assert store.row_counts() == {"PENDING": 100, "SENT": 100}


class Metrics:
    def __init__(self):
        self.values: dict[str, list[float]] = {}

    def add_metric(self, name: str, unit: str, value: float) -> None:
        assert unit in ("Count", "Milliseconds")
        self.values.setdefault(name, []).append(value)


@pytest.fixture
def redis_client():
    client = redis.Redis.from_url(REDIS_URL)
    yield client
    for key in client.scan_iter("test-flush:*"):
        client.delete(key)


def test_lock_held_by_another_flusher_skips_the_tick_and_counts_it(store, clock, tmp_path, redis_client):
    ingest(store, clock, orders(3, groups=1))
    clock.advance(POLICY.debounce_ms)
    key = f"test-flush:{tmp_path.name}"
    other = RedisLock(redis_client, ttl_ms=10_000, key=key)
    assert other.acquire()
    metrics = Metrics()
    sink = RecordingSink(tmp_path / "out.jsonl")
    service = make_service(store, sink, clock, tmp_path, metrics=metrics,
                           lock=RedisLock(redis_client, ttl_ms=10_000, key=key))
    report = service.tick()
    assert report.skipped == "lock_held" and report.published == [] and sink.calls == 0
    assert metrics.values["TicksSkipped"] == [1]
    assert other.release()
    report = service.tick()
    assert report.skipped is None and len(report.published) == 1
    assert redis_client.get(key) is None, "the lock is released after the tick"
    assert metrics.values["BatchesFlushed"] == [1] and metrics.values["BatchesFlushedIdle"] == [1]
    assert metrics.values["BatchSize"] == [3]
    assert metrics.values["EventToPublishLatency"] == [POLICY.debounce_ms]
    assert metrics.values["OldestPendingAge"] == [POLICY.debounce_ms]


def test_unreachable_redis_skips_the_tick_and_counts_it(store, clock, tmp_path):
    ingest(store, clock, orders(3, groups=1))
    clock.advance(POLICY.debounce_ms)
    metrics = Metrics()
    dead_redis = RedisLock.from_url("redis://127.0.0.1:1/0", ttl_ms=1000, timeout_s=0.2)
    service = make_service(store, RecordingSink(tmp_path / "o.jsonl"), clock, tmp_path, metrics=metrics,
                           lock=dead_redis)
    report = service.tick()
    assert report.skipped == "lock_unavailable" and report.published == []
    assert metrics.values["TicksSkipped"] == [1]
    assert store.row_counts() == {"PENDING": 3}


def test_run_ticks_on_the_interval_until_the_time_is_used(store, clock, tmp_path):
    ingest(store, clock, orders(4, groups=2))
    sink = RecordingSink(tmp_path / "out.jsonl")
    service = make_service(store, sink, clock, tmp_path)
    started = clock.now_ms()
    timeout_ms = 11 * POLICY.tick_interval_ms  # an 11-tick "invocation" on the manual clock
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.advance(round(seconds * 1000))

    reports = service.run(lambda: timeout_ms - (clock.now_ms() - started), sleep)
    assert set(sleeps) == {POLICY.tick_interval_ms / 1000}
    assert 9 <= len(reports) <= 11
    assert clock.now_ms() - started < timeout_ms - min(service.safety_margin_ms, timeout_ms // 5)
    published = [p for r in reports for p in r.published]
    assert len(published) == 2  # both groups go idle after 300 s = the 10th tick
    assert_invariants(store, sink.messages(), 4)
    assert json.loads((tmp_path / "out.jsonl").read_text().splitlines()[0])["flush_reason"] == "idle"


def test_a_claim_runs_with_the_collector_paused_and_the_tick_ends_with_it_on(store, clock, tmp_path, monkeypatch):
    import gc

    from consolidator.services import flush_claim

    seen = []
    claim = flush_claim.ClaimStep.claim

    def watched(self, *args, **kwargs):
        seen.append(gc.isenabled())
        return claim(self, *args, **kwargs)

    monkeypatch.setattr(flush_claim.ClaimStep, "claim", watched)
    assert ingest(store, clock, orders(6, groups=2)) == 6
    clock.advance(POLICY.debounce_ms)
    assert gc.isenabled()
    assert len(make_service(store, RecordingSink(tmp_path / "out.jsonl"), clock, tmp_path).tick().published) == 2
    assert seen == [False, False] and gc.isenabled()
