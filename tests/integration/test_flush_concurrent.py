"""Two flush services on one buffer at the same time, without the lock, while events keep
arriving: invariants L, D, B (and S) hold over 12,000 events."""

from __future__ import annotations

import threading

from support import T0
from test_flush import RecordingSink, assert_invariants, ingest, make_service, orders

from consolidator.rules.policy import Policy
from consolidator.store.mysql import MySQLStore

EVENTS = 12_000
CHUNK = 600
POLICY = Policy(debounce_ms=20_000, hard_window_ms=120_000, max_batch_size=20, tick_interval_ms=10_000)


def test_two_flushers_without_lock_keep_every_event_under_one_batch_id(store, clock, tmp_path, database_url):
    # 60 groups; order ids repeat (coalescing, and new rows for items already claimed: S3)
    records = orders(EVENTS, groups=60, items_per_group=150)
    sinks = [RecordingSink(tmp_path / f"out-{n}.jsonl") for n in range(2)]
    stores = [MySQLStore.from_url(database_url) for _ in range(2)]
    services = [make_service(s, sink, clock, tmp_path, policy=POLICY, publish_chunk=4)
                for s, sink in zip(stores, sinks, strict=True)]
    ingesting = threading.Event()
    ingesting.set()
    errors: list[BaseException] = []
    ticks = [0, 0]

    def flusher(n: int) -> None:
        try:
            while ingesting.is_set() or stores[n].row_counts().keys() & {"PENDING", "CLAIMED"}:
                services[n].tick()
                ticks[n] += 1
                if not ingesting.is_set():
                    clock.advance(POLICY.tick_interval_ms)  # after ingest: let everything go due
        except BaseException as error:  # noqa: BLE001 - re-raised by the assertion in the main thread
            errors.append(error)

    threads = [threading.Thread(target=flusher, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    try:
        for start in range(0, EVENTS, CHUNK):
            ingest(store, clock, records[start:start + CHUNK])
            clock.advance(5_000)
    finally:
        ingesting.clear()
        for thread in threads:
            thread.join(timeout=300)
    assert not errors, errors
    assert all(t > 1 for t in ticks), ticks

    messages = sinks[0].messages() + sinks[1].messages()
    by_id = assert_invariants(store, messages, EVENTS)
    assert all(m["group_key"] for m in by_id.values())
    assert len({m["batch_id"] for m in sinks[0].messages()}) > 0
    assert len({m["batch_id"] for m in sinks[1].messages()}) > 0, "both flushers did work"
    assert store.batch_counts() == {"SENT": len(by_id)}
    assert clock.now_ms() > T0
    for s in stores:
        s.close()
