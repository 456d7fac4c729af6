"""Invariant T: with a manual clock advanced in ticks and a flusher that keeps up, every event
is published within hard_window + tick_interval of its first ingest, even under trickles that
never go idle."""

from __future__ import annotations

import random
from datetime import datetime

from support import T0, record
from test_flush import RecordingSink, assert_invariants, ingest, make_service

from consolidator.rules.policy import Policy

POLICY = Policy(debounce_ms=60_000, hard_window_ms=300_000, max_batch_size=100, tick_interval_ms=30_000)


def epoch_ms(iso: str) -> int:
    return round(datetime.fromisoformat(iso).timestamp() * 1000)


def test_every_event_is_published_within_hard_window_plus_tick(store, clock, tmp_path):
    rng = random.Random(7)
    sink = RecordingSink(tmp_path / "out.jsonl")
    service = make_service(store, sink, clock, tmp_path, policy=POLICY)
    first_ingest: dict[int, int] = {}
    offset = 0
    end = T0 + 3_600_000
    clock.set(T0 - T0 % POLICY.tick_interval_ms)
    while clock.now_ms() < end + POLICY.hard_window_ms + POLICY.tick_interval_ms:
        if clock.now_ms() % POLICY.tick_interval_ms == 0:
            service.tick()
        if clock.now_ms() < end:
            batch = []
            for group in ("TRICKLE-1", "TRICKLE-2"):  # one event every 5 s: never idle
                if clock.now_ms() % 5_000 == 0:
                    batch.append(record(offset, location=group, order=f"O{offset}"))
                    offset += 1
            if rng.random() < 0.02:  # sparse groups that go idle
                group = f"SPARSE-{rng.randrange(5)}"
                batch.append(record(offset, location=group, order=f"O{offset}"))
                offset += 1
            for r in batch:
                first_ingest[r.offset] = clock.now_ms()
            ingest(store, clock, batch)
        clock.advance(1_000)

    messages = sink.messages()
    assert_invariants(store, messages, offset)
    bound = POLICY.hard_window_ms + POLICY.tick_interval_ms
    worst = 0
    for message in messages:
        flushed = epoch_ms(message["flushed_at"])
        for member in message["members"]:
            worst = max(worst, flushed - first_ingest[member["offset"]])
    assert 0 < worst <= bound
    assert {m["flush_reason"] for m in messages} == {"hard_window", "idle"}
    assert any(m["flush_reason"] == "hard_window" and m["group_key"].startswith("TRICKLE") for m in messages)
