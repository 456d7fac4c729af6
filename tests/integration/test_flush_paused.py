"""A paused flusher: its lock expires, a second flusher runs, the first wakes up and finishes
its tick. No event ends under two batch ids, and the late release leaves the new lock alone."""

from __future__ import annotations

import threading
import time

import redis
from support import REDIS_URL
from test_flush import POLICY, RecordingSink, assert_invariants, ingest, make_service, orders

from consolidator.store.lock import RedisLock
from consolidator.store.mysql import MySQLStore

TTL_MS = 300


class PausingSink(RecordingSink):
    """Blocks inside its first publish until told to go on (a GC pause, a frozen container)."""

    def __init__(self, path):
        super().__init__(path)
        self.paused = threading.Event()
        self.resume = threading.Event()

    def publish(self, batches):
        if not self.paused.is_set():
            self.paused.set()
            assert self.resume.wait(30), "never resumed"
        return super().publish(batches)


def test_paused_flusher_wakes_after_lock_expiry_without_splitting_events(store, clock, tmp_path, database_url):
    client = redis.Redis.from_url(REDIS_URL)
    key = f"test-flush:paused:{tmp_path.name}"
    ingest(store, clock, orders(30, groups=3))
    clock.advance(POLICY.debounce_ms)

    sink_a = PausingSink(tmp_path / "a.jsonl")
    store_a = MySQLStore.from_url(database_url)
    flusher_a = make_service(store_a, sink_a, clock, tmp_path, publish_chunk=1,
                             lock=RedisLock(client, ttl_ms=TTL_MS, key=key))
    reports_a = []
    thread = threading.Thread(target=lambda: reports_a.append(flusher_a.tick()))
    thread.start()
    try:
        assert sink_a.paused.wait(30)
        in_flight = store.batches_in_state("CLAIMED")
        assert len(in_flight) == 1
        time.sleep(TTL_MS / 1000 + 0.2)  # real Redis TTL: A's lock expires while A is paused
        assert client.get(key) is None

        sink_b = RecordingSink(tmp_path / "b.jsonl")
        flusher_b = make_service(store, sink_b, clock, tmp_path, lock=RedisLock(client, ttl_ms=10_000, key=key))
        report_b = flusher_b.tick()
        assert report_b.skipped is None
        assert report_b.published[0].batch_id == in_flight[0]["batch_id"], "B re-publishes A's claim"
        assert len(report_b.published) == 3 and store.row_counts() == {"SENT": 30}

        newer = RedisLock(client, ttl_ms=10_000, key=key)  # someone holds the lock when A wakes
        assert newer.acquire()
    finally:
        sink_a.resume.set()
        thread.join(30)
    report_a = reports_a[0]
    assert [p.batch_id for p in report_a.published] == [in_flight[0]["batch_id"]]
    assert client.get(key) == newer.token.encode(), "A's late release must not delete another's lock"
    assert newer.release()

    messages = sink_a.messages() + sink_b.messages()
    assert len(messages) == 4  # A's batch twice (same id, same bytes), the two others once
    by_id = assert_invariants(store, messages, 30)
    assert len(by_id) == 3 and store.batch_counts() == {"SENT": 3}
    store_a.close()
