"""Crash points: a flusher dies after claim, after publish, or in the middle of the mark.
The next tick re-publishes the same batch id; no event ends under two ids; nothing stays CLAIMED."""

from __future__ import annotations

import contextlib

import pytest
from test_flush import POLICY, RecordingSink, assert_invariants, ingest, make_service, orders

from consolidator.store.mysql import MySQLStore


class Crash(BaseException):
    """The process dies here (BaseException, so no handler in the code under test catches it)."""


class CrashingStore(MySQLStore):
    """The real store, dying at one armed point the first time it is reached."""

    def __init__(self, params, point: str):
        super().__init__(params)
        self.point = point
        self.armed = True

    def _fire(self, point: str) -> None:
        if self.armed and self.point == point:
            self.armed = False
            raise Crash(point)

    def claim(self, *args, **kwargs):
        batch = super().claim(*args, **kwargs)
        if batch is not None:
            self._fire("after_claim")
        return batch

    def mark_sent_many(self, batch_ids, now_ms):
        self._fire("after_publish")
        return super().mark_sent_many(batch_ids, now_ms)

    @contextlib.contextmanager
    def transaction(self):
        with super().transaction() as cursor:
            if self.point != "during_mark":
                yield cursor
                return
            execute = cursor.execute

            def execute_then_maybe_die(statement, args=None):
                result = execute(statement, args)
                if statement.startswith("UPDATE batches SET state"):
                    self._fire("during_mark")  # batch rows updated, not committed: rollback
                return result

            cursor.execute = execute_then_maybe_die
            yield cursor


@pytest.mark.parametrize("point", ["after_claim", "after_publish", "during_mark"])
def test_next_tick_republishes_the_same_batch_id(point, store, clock, tmp_path):
    ingest(store, clock, orders(30, groups=3))
    clock.advance(POLICY.debounce_ms)
    sink = RecordingSink(tmp_path / "out.jsonl")
    crashing = CrashingStore(store.params, point)
    with pytest.raises(Crash):
        make_service(crashing, sink, clock, tmp_path, publish_chunk=1).tick()
    crashing.close()

    claimed = store.batches_in_state("CLAIMED")
    assert len(claimed) == 1, "the crash left exactly the batch in flight CLAIMED"
    stuck = claimed[0]["batch_id"]
    rows = store.row_counts()
    assert rows["CLAIMED"] == 10 and rows.get("SENT", 0) == 0
    published_before = sink.messages()
    assert [m["batch_id"] for m in published_before] == ([stuck] if point != "after_claim" else [])

    clock.advance(POLICY.tick_interval_ms)
    report = make_service(store, sink, clock, tmp_path).tick()
    assert report.published[0].batch_id == stuck, "CLAIMED batches are re-published first"
    assert report.published[0].attempt == 1, "a crash is not a failed publish"
    assert len(report.published) == 3
    messages = sink.messages()
    if published_before:
        assert messages[0] == messages[1] == published_before[0], "the re-publish is identical"
    assert_invariants(store, messages, 30)
    assert store.batch_counts() == {"SENT": 3}


def test_crashes_after_publish_never_count_as_failed_attempts(store, clock, tmp_path):
    """max_attempts counts publishes the sink rejected, nothing else: a flusher killed after the
    sink confirmed, more times in a row than max_attempts, leaves a batch that ends SENT (not
    DEAD, no dead-letter entry, no false DeadBatches)."""
    ingest(store, clock, orders(10, groups=1))
    clock.advance(POLICY.debounce_ms)
    sink = RecordingSink(tmp_path / "out.jsonl")
    max_attempts = 2
    for crash in range(max_attempts + 3):
        crashing = CrashingStore(store.params, "after_publish")
        with pytest.raises(Crash):
            make_service(crashing, sink, clock, tmp_path, max_attempts=max_attempts).tick()
        crashing.close()
        claimed = store.batches_in_state("CLAIMED")
        assert [b["attempts"] for b in claimed] == [0], f"crash {crash + 1} counted as a failure"
        clock.advance(POLICY.tick_interval_ms)

    report = make_service(store, sink, clock, tmp_path, max_attempts=max_attempts).tick()
    assert report.dead == 0 and report.publish_failures == 0
    assert [p.attempt for p in report.published] == [1]
    assert store.batch_counts() == {"SENT": 1} and store.row_counts() == {"SENT": 10}
    assert not (tmp_path / "dead.jsonl").exists(), "nothing was dead-lettered"
    messages = sink.messages()
    assert len(messages) == max_attempts + 4 and len({m["batch_id"] for m in messages}) == 1
    assert_invariants(store, messages, 10)


def test_rejected_publishes_still_count_after_a_crash(store, clock, tmp_path):
    """The other half: failures the sink reports are counted even when crashes come between."""
    ingest(store, clock, orders(10, groups=1))
    clock.advance(POLICY.debounce_ms)
    sink = RecordingSink(tmp_path / "out.jsonl")
    crashing = CrashingStore(store.params, "after_publish")
    with pytest.raises(Crash):
        make_service(crashing, sink, clock, tmp_path, max_attempts=2).tick()
    crashing.close()
    sink.down = True
    service = make_service(store, sink, clock, tmp_path, max_attempts=2)
    first = service.tick()
    assert first.publish_failures == 1 and first.dead == 0
    assert [b["attempts"] for b in store.batches_in_state("CLAIMED")] == [1]
    second = service.tick()
    assert second.publish_failures == 1 and second.dead == 1
    assert store.batch_counts() == {"DEAD": 1}

