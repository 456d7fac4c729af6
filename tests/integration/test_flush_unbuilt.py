"""One group's batch that cannot be built never stops the tick (real MariaDB, real flush service).

Sums past the double range split the claim instead of raising; any other unexpected error while
a group's batch is built (a stored row this code cannot read, a message that cannot be built)
fails that group only: counted with its reason, retried as a failed publish is, and after
``max_attempts`` dead-lettered; every other group is published in the same tick."""

from __future__ import annotations

import orjson
from support import record, sql
from test_flush import POLICY, RecordingSink, ingest, orders

import consolidator.services.flush_failures as failures_module
import consolidator.services.flush_publish as publish_module
from consolidator.rules.events import FieldNames
from consolidator.rules.policy import Policy
from consolidator.rules.shape import Shape, parse_outputs
from consolidator.services.flush import FlushService
from consolidator.services.ingest import IngestService
from consolidator.sinks.deadletter import FileDeadLetter

SHAPE = Shape(parse_outputs('[{"name": "total", "op": "sum", "path": "amount"}]'))
NAMES = FieldNames(group_key="tenant", item_id="user", shape=SHAPE)
SHAPED = Policy(debounce_ms=1_000, hard_window_ms=10_000, max_batch_size=100, tick_interval_ms=1_000)


class Metrics:
    def __init__(self) -> None:
        self.counts: dict[str, float] = {}

    def add_metric(self, name: str, unit: str, value: float) -> None:
        self.counts[name] = self.counts.get(name, 0) + value


def _shaped_ingest(store, clock, tmp_path, events: list[tuple[str, str, bytes]]) -> None:
    """``events``: (tenant, user, the literal of ``amount``), ingested by the real service."""
    records = [record(offset, b'{"tenant": "%b", "user": "%b", "amount": %b}' % (t.encode(), u.encode(), amount),
                      topic="events", key=t.encode()) for offset, (t, u, amount) in enumerate(events)]
    service = IngestService(store, FileDeadLetter(tmp_path / "ingest-dead.jsonl"), NAMES, 1 << 20, clock)
    outcome = service.ingest(records)
    assert (outcome.stored, outcome.failed, outcome.dead_lettered) == (len(events), [], 0)


def _states(store) -> dict[str, str]:
    rows = sql(store, "SELECT r.item_id, COALESCE(b.state, r.status) AS state FROM buffer_rows r"
                      " LEFT JOIN batches b ON r.status = 'CLAIMED' AND b.batch_id = r.batch_id")
    return {r["item_id"]: r["state"] for r in rows}


def test_two_sums_past_the_double_range_split_the_claim_and_every_group_is_published(store, clock, tmp_path):
    """Two valid events of 1.7e308 in one group: the claim splits them (each batch's total is
    finite), as it splits sums past int64; the three other groups go out in the same tick."""
    _shaped_ingest(store, clock, tmp_path, [("T0", "a", b"1.7e308"), ("T0", "b", b"1.7e308"),
                                            ("T1", "c", b"1"), ("T2", "d", b"2.5"), ("T3", "e", b"-1.7e308")])
    clock.advance(SHAPED.debounce_ms)
    sink = RecordingSink(tmp_path / "out.jsonl")
    report = FlushService(store, sink, FileDeadLetter(tmp_path / "dead.jsonl"), SHAPED, clock, NAMES).tick()

    assert (report.publish_failures, report.build_failures, report.dead) == (0, 0, 0)
    totals = sorted((m["group_key"], m["item_ids"], m["aggregates"]["total"]) for m in sink.messages())
    assert totals == [("T0", ["a"], 1.7e308), ("T0", ["b"], 1.7e308), ("T1", ["c"], 1), ("T2", ["d"], 2.5),
                      ("T3", ["e"], -1.7e308)]
    assert set(_states(store).values()) == {"SENT"}


def test_a_stored_row_this_code_cannot_read_fails_its_group_only_and_goes_dead(store, clock, tmp_path):
    """The second row of WH-0 holds items no reader parses. Its group's claim fails: counted,
    the group's first row set aside as a failed batch (published next tick), then the bad row
    alone, which after ``max_attempts`` reaches the dead-letter destination with its reason.
    The other groups are published in the first tick, WH-0's good rows in the next ones."""
    ingest(store, clock, orders(9, groups=3))  # WH-0: O0, O3, O6
    sql(store, "UPDATE buffer_rows SET items = '[[\"SKU-1\", 2' WHERE item_id = 'O3'")
    clock.advance(POLICY.debounce_ms)
    sink, metrics = RecordingSink(tmp_path / "out.jsonl"), Metrics()
    dead_letter = FileDeadLetter(tmp_path / "dead.jsonl")
    service = FlushService(store, sink, dead_letter, POLICY, clock, max_attempts=2, metrics=metrics)

    first = service.tick()
    assert first.build_failures == 1 and sorted(p.group_key for p in first.published) == ["WH-1", "WH-2"]
    assert metrics.counts["BatchBuildFailures"] == 1
    set_aside = store.batches_in_state("CLAIMED")
    assert [(b["group_key"], b["member_count"], b["attempts"]) for b in set_aside] == [("WH-0", 1, 1)]
    assert "JSONDecodeError" in set_aside[0]["last_error"]
    for _ in range(3):
        clock.advance(POLICY.tick_interval_ms)
        service.tick()

    assert _states(store) == {"O0": "SENT", "O3": "DEAD", "O6": "SENT", **{f"O{i}": "SENT" for i in (1, 2, 4, 5, 7, 8)}}
    (entry,) = dead_letter.read()
    assert (entry["kind"], entry["reason"], entry["attempts"]) == ("dead_batch", "max_attempts", 2)
    assert entry["batch"]["group_key"] == "WH-0" and entry["batch"]["message_built"] is False
    assert "JSONDecodeError" in entry["detail"]
    assert sorted(i for m in sink.messages() for i in m["item_ids"]) == ["O0", "O1", "O2", "O4", "O5", "O6", "O7",
                                                                         "O8"]


def test_a_message_that_cannot_be_built_is_a_failed_attempt_then_a_dead_batch(store, clock, tmp_path, monkeypatch):
    """An unexpected error building WH-1's message (injected): the batch counts a failed attempt
    per tick, is dead-lettered with its members after ``max_attempts``; WH-0 and WH-2 are sent."""
    real = publish_module.build_message

    def build_message(group_key, *args, **kwargs):
        if group_key == "WH-1":
            raise RuntimeError("cannot build this one")
        return real(group_key, *args, **kwargs)

    monkeypatch.setattr(publish_module, "build_message", build_message)
    monkeypatch.setattr(failures_module, "build_message", build_message)
    ingest(store, clock, orders(6, groups=3))
    clock.advance(POLICY.debounce_ms)
    sink, dead_letter = RecordingSink(tmp_path / "out.jsonl"), FileDeadLetter(tmp_path / "dead.jsonl")
    service = FlushService(store, sink, dead_letter, POLICY, clock, max_attempts=2)

    first = service.tick()
    assert sorted(p.group_key for p in first.published) == ["WH-0", "WH-2"]
    assert (first.build_failures, first.publish_failures, first.dead) == (1, 1, 0)
    assert [(b["group_key"], b["attempts"]) for b in store.batches_in_state("CLAIMED")] == [("WH-1", 1)]
    clock.advance(POLICY.tick_interval_ms)
    second = service.tick()
    assert (second.build_failures, second.dead) == (1, 1)

    (entry,) = dead_letter.read()
    assert entry["batch"]["message_built"] is False and entry["attempts"] == 2
    assert sorted(m["offset"] for m in entry["batch"]["members"]) == [1, 4]
    assert entry["detail"] == "message not built: RuntimeError: cannot build this one"
    assert orjson.loads(orjson.dumps(entry))["batch"]["group_key"] == "WH-1"
    assert store.batch_counts() == {"DEAD": 1, "SENT": 2}
