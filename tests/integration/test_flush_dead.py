"""Sink down for several ticks: attempts grow, batches become DEAD after max_attempts and reach
the dead-letter destination (only then DEAD); rows are never lost; a redrive sends them."""

from __future__ import annotations

from test_flush import POLICY, RecordingSink, assert_invariants, ingest, orders

from consolidator.services.flush import FlushService
from consolidator.sinks.deadletter import FileDeadLetter


class SwitchableDeadLetter(FileDeadLetter):
    down = False

    def send(self, entries):
        return set(range(len(entries))) if self.down else super().send(entries)


def attempts(store) -> list[int]:
    return sorted(b["attempts"] for b in store.batches_in_state("CLAIMED"))


def test_batches_go_dead_after_max_attempts_and_nothing_is_lost(store, clock, tmp_path):
    ingest(store, clock, orders(20, groups=2))
    clock.advance(POLICY.debounce_ms)
    sink = RecordingSink(tmp_path / "out.jsonl")
    sink.down = True
    dead_letter = SwitchableDeadLetter(tmp_path / "dead.jsonl")
    service = FlushService(store=store, sink=sink, dead_letter=dead_letter, policy=POLICY, clock=clock,
                           max_attempts=3)

    for expected in ([1, 1], [2, 2]):
        report = service.tick()
        assert report.publish_failures == 2 and report.dead == 0 and report.published == []
        assert attempts(store) == expected
        assert store.row_counts() == {"CLAIMED": 20}
        clock.advance(POLICY.tick_interval_ms)
    assert store.batches_in_state("CLAIMED")[0]["last_error"] == "sink down (test)"

    dead_letter.down = True  # third failure, but the dead-letter write fails too: stay CLAIMED
    report = service.tick()
    assert report.publish_failures == 2 and report.dead == 0 and attempts(store) == [3, 3]
    clock.advance(POLICY.tick_interval_ms)

    dead_letter.down = False
    calls = sink.calls
    report = service.tick()  # out of attempts: dead-lettered without another publish
    assert sink.calls == calls and report.publish_failures == 0
    assert report.dead == 2
    assert store.row_counts() == {"DEAD": 20} and store.batch_counts() == {"DEAD": 2}
    entries = dead_letter.read()
    assert [(e["kind"], e["reason"], e["attempts"], e["detail"]) for e in entries] == [
        ("dead_batch", "max_attempts", 3, "sink down (test)")] * 2
    assert sorted(m["offset"] for e in entries for m in e["batch"]["members"]) == list(range(20))
    assert_invariants(store, [], 20, dead=entries)

    # redrive: same batch ids published once the sink is back
    sink.down = False
    for entry in entries:
        assert store.revive_dead_batch(entry["batch"]["batch_id"])
    report = service.tick()
    assert sorted(p.batch_id for p in report.published) == sorted(e["batch"]["batch_id"] for e in entries)
    def key(m):
        return m["batch_id"]

    assert sorted(sink.messages(), key=key) == sorted((e["batch"] for e in entries), key=key)
    assert_invariants(store, sink.messages(), 20)
