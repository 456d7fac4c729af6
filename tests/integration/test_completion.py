"""Batch completion tracking against real MariaDB: seal at flush, idempotent acks, exactly one
completion, acks before SENT, refusals, concurrent ackers, crash recovery, overdue and cleanup,
and a flush with tracking off that issues no tracking statement."""

from __future__ import annotations

import contextlib
import random
import threading
from pathlib import Path

import jsonschema
import pytest
from support import sql
from test_flush import RecordingSink, ingest, make_service, orders

from consolidator.rules.batch import iso_ms, load_schema, schema_name
from consolidator.rules.clock import ManualClock
from consolidator.rules.completion import Ack, completion_id, load_completion_schema
from consolidator.rules.policy import Policy
from consolidator.services.acks import AckService
from consolidator.services.cleanup import CleanupService
from consolidator.sinks.file import FileSink
from consolidator.store.completion import UNKNOWN_BATCH, UNKNOWN_ITEM, UNKNOWN_MEMBER, SealedBatch
from consolidator.store.mysql import ConnectionParams, MySQLStore

COMPLETION = jsonschema.Draft202012Validator(load_completion_schema(), format_checker=jsonschema.FormatChecker())
POLICY = Policy(debounce_ms=300_000, hard_window_ms=1_800_000, max_batch_size=500, tick_interval_ms=30_000)


class Metrics:
    """Records what a service counts (stands in for Powertools ``Metrics``)."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def add_metric(self, name: str, unit: str, value: float) -> None:
        self.values[name] = self.values.get(name, 0) + value


def flushed(store, clock, tmp_path: Path, n: int, *, groups: int = 1, tracking: bool = True,
            sink_down: bool = False) -> tuple[list[dict], RecordingSink]:
    """Ingest ``n`` orders, let them go idle, run one tick; the published (or, sink down,
    the would-be) batch messages."""
    ingest(store, clock, orders(n, groups=groups))
    clock.advance(POLICY.debounce_ms)
    sink = RecordingSink(tmp_path / "batches.jsonl")
    sink.down = sink_down
    make_service(store, sink, clock, tmp_path, policy=POLICY, completion_tracking=tracking).tick()
    return sink.messages(), sink


def ack_service(store, clock, path: Path, metrics=None) -> tuple[AckService, RecordingSink]:
    sink = RecordingSink(path)
    return AckService(store, sink, clock, metrics or Metrics(), deadline_ms=600_000, lease_ms=60_000), sink


def test_random_order_with_duplicates_completes_exactly_once_at_the_last_distinct_member(store, clock, tmp_path):
    messages, _ = flushed(store, clock, tmp_path, 40)
    (message,) = messages
    jsonschema.Draft202012Validator(load_schema(schema_name(message))).validate(message)
    assert (message["completion_tracking"], schema_name(message)) == (True, "1.2")
    members = message["members"]
    assert len(members) == 40 and all("item_id" in m for m in members)
    # half the members by index, half by item id; a quarter of them twice
    acks = [Ack(message["batch_id"], members=(i,)) if i % 2 else Ack(message["batch_id"], item_ids=(m["item_id"],))
            for i, m in enumerate(members)]
    acks += random.Random(7).sample(acks, 10)
    random.Random(11).shuffle(acks)
    last_distinct = max(acks.index(a) for a in set(acks))
    service, completions = ack_service(store, clock, tmp_path / "completions.jsonl")
    for position, ack in enumerate(acks):
        clock.advance(1000)
        (result,) = service.ack([ack])
        assert result.ok
        assert len(completions.messages()) == (1 if position >= last_distinct else 0), position
        if position == last_distinct:
            completed_at = clock.now_ms()
    (completion,) = completions.messages()
    COMPLETION.validate(completion)
    assert completion["batch_id"] == message["batch_id"] and completion["member_count"] == 40
    assert completion["completion_id"] == completion_id(message["batch_id"])
    tracker = store.tracker(message["batch_id"])
    assert tracker.complete and tracker.acked_count == 40 and tracker.outbox == "PUBLISHED"
    assert tracker.completed_at_ms == completed_at
    assert store.acked_members(message["batch_id"]) == list(range(40))
    assert service.metrics.values["AcksDuplicate"] == 10 and service.metrics.values["AcksApplied"] == 40


def test_acks_before_sent_count_and_unknown_batches_and_members_are_refused_and_counted(store, clock, tmp_path):
    flushed(store, clock, tmp_path, 3, sink_down=True)  # sealed, publish failed: still CLAIMED
    (head,) = store.batches_in_state("CLAIMED")
    batch_id = head["batch_id"]
    assert store.tracker(batch_id).member_count == 3
    metrics = Metrics()
    service, completions = ack_service(store, clock, tmp_path / "completions.jsonl", metrics)
    results = service.ack([
        Ack("0" * 32, members=(0,)),
        Ack(batch_id, members=(0, 7)),
        Ack(batch_id, item_ids=("no-such-order",)),
    ])
    assert [r.refused for r in results] == [[(None, UNKNOWN_BATCH)], [(7, UNKNOWN_MEMBER)],
                                            [("no-such-order", UNKNOWN_ITEM)]]
    assert results[1].newly_acked == 1  # the known member of a partly bad ack still counts
    assert metrics.values["AcksRefused"] == 3
    assert store.tracker(batch_id).acked_count == 1
    service.ack([Ack(batch_id, members=(1, 2))])
    assert [c["batch_id"] for c in completions.messages()] == [batch_id]
    assert store.batches_in_state("CLAIMED")[0]["batch_id"] == batch_id  # never marked SENT yet
    assert store.tracker("f" * 32) is None


def _racer(database_url: str, path: Path, clock: ManualClock, barrier: threading.Barrier, acks: list[Ack],
           errors: list[BaseException]) -> None:
    store = MySQLStore(ConnectionParams.from_url(database_url))
    service = AckService(store, FileSink(path), clock)
    try:
        for ack in acks:
            barrier.wait()
            service.ack([ack])
    except BaseException as error:  # noqa: BLE001 - asserted empty by the main thread
        errors.append(error)
        barrier.abort()
    finally:
        store.close()


def test_concurrent_ackers_racing_on_the_last_members_publish_one_completion(store, clock, tmp_path, database_url):
    batches = 30
    sealed = [SealedBatch(f"{i:032x}", f"WH-{i}", ("A", "B", "C", "D")) for i in range(batches)]
    assert store.seal(sealed, clock.now_ms()) == batches
    store.apply_acks([Ack(b.batch_id, members=(0, 1)) for b in sealed], clock.now_ms())
    barrier = threading.Barrier(2, timeout=30)
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_racer, args=(database_url, tmp_path / f"completions-{member}.jsonl", clock,
                                              barrier, [Ack(b.batch_id, members=(member,)) for b in sealed], errors))
        for member in (2, 3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    published = [m["batch_id"] for member in (2, 3) for m in FileSink(tmp_path / f"completions-{member}.jsonl").read()]
    assert sorted(published) == sorted(b.batch_id for b in sealed)  # each batch exactly once
    assert sql(store, "SELECT COUNT(*) AS n FROM completion_trackers WHERE outbox = 'PUBLISHED'")[0]["n"] == batches


def test_a_completion_lost_in_a_crash_is_republished_with_the_same_id_after_the_lease(store, clock, tmp_path):
    store.seal([SealedBatch("a" * 32, "WH-1", ("A", "B"))], clock.now_ms())
    acked_at = clock.now_ms()
    # the last ack commits, then the acker dies before publishing
    (result,) = store.apply_acks([Ack("a" * 32, members=(0, 1))], acked_at)
    assert result.completed is not None
    service, completions = ack_service(store, clock, tmp_path / "completions.jsonl")
    clock.advance(59_999)
    assert service.sweep().republished == 0  # still leased to the acker that died
    completions.down = True
    clock.advance(1)
    report = service.sweep()
    assert (report.republished, report.publish_failures) == (0, 1)
    assert store.tracker("a" * 32).outbox == "PENDING"
    completions.down = False
    clock.advance(60_000)
    assert service.sweep().republished == 1
    clock.advance(60_000)
    assert service.sweep().republished == 0
    (completion,) = completions.messages()
    assert completion["completion_id"] == completion_id("a" * 32)
    assert completion["completed_at"] == iso_ms(acked_at)  # the ack's time, not the sweep's


def test_the_completing_ack_publishes_its_completion_and_marks_it_published(store, clock, tmp_path):
    store.seal([SealedBatch("b" * 32, "WH-1", ("A", "B"))], clock.now_ms())
    service, completions = ack_service(store, clock, tmp_path / "completions.jsonl")
    (result,) = service.ack([Ack("b" * 32, members=(0, 1))])
    assert result.completed is not None and result.completed.outbox == "PUBLISHED"
    tracker = store.tracker("b" * 32)
    assert (tracker.outbox, tracker.published_at_ms) == ("PUBLISHED", clock.now_ms())
    assert [m["batch_id"] for m in completions.messages()] == ["b" * 32]
    clock.advance(60_000)
    assert service.sweep().republished == 0  # nothing left for the sweep


def test_overdue_batches_are_counted_listed_and_cleaned_up(store, clock, tmp_path):
    messages, _ = flushed(store, clock, tmp_path, 6, groups=3)  # three SENT batches of 2
    service, _ = ack_service(store, clock, tmp_path / "completions.jsonl")
    done, partial, untouched = sorted(messages, key=lambda m: m["group_key"])
    service.ack([Ack(done["batch_id"], members=(0, 1)), Ack(partial["batch_id"], members=(1,))])
    clock.advance(600_000)
    assert service.sweep().incomplete == 0  # not overdue yet: deadline 600 s after the seal
    clock.advance(1)
    report = service.sweep()
    assert report.incomplete == 2 and report.oldest_incomplete_age_ms == 600_001
    assert service.metrics.values["IncompleteBatches"] == 2
    assert [t.batch_id for t in store.incomplete_trackers(clock.now_ms() - 600_000)] == sorted(
        [partial["batch_id"], untouched["batch_id"]])

    cleanup = CleanupService(store, clock, completion_max_age_ms=86_400_000)
    assert cleanup.remove_trackers().trackers_removed == {"finished": 0, "dead": 0, "orphaned": 0}
    clock.advance(86_400_000)
    assert cleanup.remove_trackers().trackers_removed == {"finished": 0, "dead": 0, "orphaned": 2}
    assert store.tracker(partial["batch_id"]) is None and store.tracker(done["batch_id"]).complete
    clock.advance(4 * 31 * 86_400_000)  # past the partition retention (3 months)
    assert cleanup.run().trackers_removed == {"finished": 1, "dead": 0, "orphaned": 0}
    assert sql(store, "SELECT (SELECT COUNT(*) FROM completion_trackers) + (SELECT COUNT(*) FROM completion_items) AS n")[0]["n"] == 0


def test_trackers_of_dead_batches_are_removed(store, clock, tmp_path):
    ingest(store, clock, orders(2, groups=1))
    clock.advance(POLICY.debounce_ms)
    sink = RecordingSink(tmp_path / "batches.jsonl")
    sink.down = True
    service = make_service(store, sink, clock, tmp_path, policy=POLICY, completion_tracking=True, max_attempts=1)
    assert service.tick().dead == 1
    (dead,) = store.batches_in_state("DEAD")
    assert store.tracker(dead["batch_id"]) is not None
    report = CleanupService(store, clock, completion_max_age_ms=86_400_000).remove_trackers()
    assert report.trackers_removed["dead"] == 1 and store.tracker(dead["batch_id"]) is None


class SpyStore(MySQLStore):
    """The real store, recording every statement it sends."""

    statements: list[str]

    @contextlib.contextmanager
    def transaction(self):
        with super().transaction() as cur:
            execute, executemany = cur.execute, cur.executemany

            def spy_execute(query, args=None):
                self.statements.append(query)
                return execute(query, args)

            def spy_executemany(query, args):
                self.statements.append(query)
                return executemany(query, args)

            cur.execute, cur.executemany = spy_execute, spy_executemany
            yield cur


@pytest.mark.parametrize("tracking", [False, True])
def test_with_tracking_off_the_flush_issues_no_tracking_statement(database_url, clock, tmp_path, tracking):
    store = SpyStore(ConnectionParams.from_url(database_url))
    store.statements = []
    store.migrate(clock.now_ms())
    store.statements.clear()
    messages, _ = flushed(store, clock, tmp_path, 10, groups=2, tracking=tracking)
    assert len(messages) == 2 and store.statements
    touched = [s for s in store.statements if "completion" in s.lower()]
    if tracking:
        assert [s.split("(")[0].strip() for s in touched] == ["SELECT ack_key FROM completion_keys WHERE id = 1",
                                                              "INSERT INTO completion_trackers",
                                                              "INSERT INTO completion_items"]
        assert all(m["completion_tracking"] for m in messages)
    else:
        assert touched == []
        assert all("completion_tracking" not in m and "item_id" not in m["members"][0] for m in messages)
    store.close()
