"""Stateful model test: ingest, replays, clock ticks, flush ticks (with crashes between claim,
publish and mark, and sink outages) and cleanup, run against real MariaDB and compared with a
small reference model after every step.

The model is written from the contract (docs/semantics.md sections 3, 4, 5, 9, 10), not from the code:
S1 replay is a no-op, S2 newer-by-position replaces and last-update moves forward, S3 a new
event for a claimed item starts a new row, S4 one PENDING row per item and month; a due group
is claimed oldest first in batches of at most ``max_batch_size``; CLAIMED batches are
re-published first, under the same id and bytes; a crash or an outage loses nothing; cleanup
drops only expired partitions without unsent rows. One database serves every example
(tables emptied in between).

Examples: ``MODEL_EXAMPLES``, else 300 (about 25 s on 2 cores, so that ``make test`` stays well
inside CI's time), or 1,000 in the deep run (``HYPOTHESIS_DEEP=1``, tests/support.py; about
80 s), e.g. before a release or after a change to the buffer, the claim or cleanup.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import local_mariadb
import pymysql
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from support import DEEP, MYSQL_HOST, MYSQL_PASSWORD, MYSQL_PORT, MYSQL_USER, T0, order_value

from consolidator.rules.clock import ManualClock
from consolidator.rules.events import (
    FieldNames,
    KafkaRecord,
    SourcePosition,
    bucket_of,
    months_after,
)
from consolidator.rules.policy import Policy
from consolidator.services.cleanup import CleanupService
from consolidator.services.flush import FlushService
from consolidator.services.ingest import IngestService
from consolidator.sinks.deadletter import FileDeadLetter
from consolidator.sinks.file import FileSink
from consolidator.store.mysql import ConnectionParams, MySQLStore
from consolidator.store.partitions import BUFFER_TABLES

POLICY = Policy(debounce_ms=60_000, hard_window_ms=300_000, max_batch_size=3, tick_interval_ms=30_000)
GROUPS = ("WH-1", "WH-2")
ITEMS = ("A", "B", "C")
DECEMBER = T0 + 20 * 86_400_000  # the next monthly bucket
TOPIC = "orders"
DEFAULT_EXAMPLES = 1000 if DEEP else 300  # MODEL_EXAMPLES wins (module docstring)
MAX_ATTEMPTS = 1_000  # crashes count attempts on this code; DEAD is not what this model checks

_shared: dict[str, object] = {}


@pytest.fixture(scope="module", autouse=True)
def shared_database(tmp_path_factory):
    """One migrated database and one scratch directory for every example of this module, on a
    MariaDB of this module that does not fsync each commit (the shared one does: 15 ms each)."""
    with contextlib.ExitStack() as stack:
        host, port, user, password = MYSQL_HOST, MYSQL_PORT, MYSQL_USER, MYSQL_PASSWORD
        if local_mariadb.available():
            port = stack.enter_context(local_mariadb.mariadb(
                "--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0", in_memory=True))
            host, user, password = "127.0.0.1", "root", ""
        name = f"consolidator_model_{uuid.uuid4().hex[:10]}"
        admin = pymysql.connect(host=host, port=port, user=user, password=password, autocommit=True)
        stack.callback(admin.close)
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        stack.callback(lambda: admin.cursor().execute(f"DROP DATABASE IF EXISTS {name}"))
        store = MySQLStore(ConnectionParams(host, port, user, password, name))
        stack.callback(store.close)
        store.migrate(T0)
        _shared.update(store=store, directory=tmp_path_factory.mktemp("model"), layout=_layout(store))
        yield
        _shared.clear()


def _layout(store: MySQLStore) -> dict[str, str]:
    """``SHOW CREATE TABLE`` of the partitioned tables, auto-increment counter left out."""
    layout = {}
    with store.transaction() as cur:
        for table in BUFFER_TABLES:
            cur.execute(f"SHOW CREATE TABLE {table}")
            layout[table] = re.sub(r" AUTO_INCREMENT=\d+", "", cur.fetchone()["Create Table"])
    return layout


def _restore_partitions(store: MySQLStore) -> None:
    """Back to the partitions of a migration at T0 (a cleanup dropped some): the tables are
    empty, so re-partitioning is two cheap statements, where dropping every table and migrating
    again took a dozen DDL statements per example. Checked against the layout of the migration."""
    pristine: dict[str, str] = _shared["layout"]
    with store.transaction() as cur:
        for table, create in pristine.items():
            cur.execute(f"ALTER TABLE {table} {create[create.index(' PARTITION BY '):]}")
    assert _layout(store) == pristine


class Crash(BaseException):
    """The flusher process dies here (not an error any code may catch)."""


@dataclass
class CrashingSink:
    """The real file sink, and a switch for what happens at the next publish of a tick."""

    sink: FileSink
    mode: str = "ok"  # ok | crash_before | crash_after | down

    def publish(self, batches):
        if self.mode == "crash_before":
            raise Crash("before publish")
        if self.mode == "down":
            return {i: "sink down" for i in range(len(batches))}
        errors = self.sink.publish(batches)
        if self.mode == "crash_after":
            raise Crash("after publish, before mark")
        return errors

    def close(self) -> None:
        self.sink.close()


@dataclass
class Row:
    bucket: int
    group: str
    item: str
    position: SourcePosition
    items: tuple[tuple[str, int], ...]
    first_seen: int
    last_update: int
    merged: int = 1

    def claim_order(self) -> tuple:
        return (self.first_seen, self.position)


@dataclass
class Batch:
    group: str
    rows: list[Row]
    reason: str
    claimed_at: int
    state: str = "CLAIMED"
    published: bool = False

    @property
    def members(self) -> frozenset[SourcePosition]:
        return frozenset(r.position for r in self.rows)


@dataclass
class Model:
    pending: dict[tuple[int, str, str], Row] = field(default_factory=dict)
    batches: list[Batch] = field(default_factory=list)
    seen: dict[SourcePosition, int] = field(default_factory=dict)  # stored position -> bucket
    poison: set[SourcePosition] = field(default_factory=set)

    def ingest(self, record: KafkaRecord, valid: bool, now: int) -> None:
        position = SourcePosition(record.topic, record.partition, record.offset)
        if not valid:
            self.poison.add(position)
            return
        bucket = bucket_of(record.timestamp_ms)
        if position in self.seen:
            return  # S1
        self.seen[position] = bucket
        body = json.loads(record.value)
        items = tuple((i["sku"], i["quantity"]) for i in body["items"])
        key = (bucket, body["location_id"], body["order_id"])
        row = self.pending.get(key)
        if row is None:  # S3/S4: a new PENDING row
            self.pending[key] = Row(bucket, key[1], key[2], position, items, now, now)
            return
        row.merged += 1  # S2
        row.last_update = max(row.last_update, now)
        if position > row.position:
            row.position, row.items = position, items

    def due_reason(self, rows: list[Row], now: int) -> str | None:
        if not rows:
            return None
        if len(rows) >= POLICY.max_batch_size:
            return "full"
        if now - min(r.first_seen for r in rows) >= POLICY.hard_window_ms:
            return "hard_window"
        if now - max(r.last_update for r in rows) >= POLICY.debounce_ms:
            return "idle"
        return None

    def tick(self, now: int, mode: str) -> bool:
        """One flush tick; returns whether it crashed."""
        claimed = sorted((b for b in self.batches if b.state == "CLAIMED"), key=lambda b: b.claimed_at)
        if claimed and self._deliver(claimed, mode):
            return True
        outbox: list[Batch] = []
        groups = {g: [r for r in self.pending.values() if r.group == g] for g in GROUPS}
        due = sorted(((min(r.first_seen for r in rows), g) for g, rows in groups.items()
                      if self.due_reason(rows, now)))
        for _, group in due:
            rows = sorted(groups[group], key=Row.claim_order)
            reason = self.due_reason(rows, now)
            while reason:
                taken, rows = rows[:POLICY.max_batch_size], rows[POLICY.max_batch_size:]
                for row in taken:
                    del self.pending[(row.bucket, row.group, row.item)]
                outbox.append(Batch(group, taken, reason, now))
                if len(taken) < POLICY.max_batch_size:
                    break
                reason = self.due_reason(rows, now)
        self.batches.extend(outbox)
        return bool(outbox) and self._deliver(outbox, mode)

    @staticmethod
    def _deliver(batches: list[Batch], mode: str) -> bool:
        if mode in ("crash_before", "down"):
            return mode == "crash_before"
        for batch in batches:
            batch.published = True
            if mode == "ok":
                batch.state = "SENT"
        return mode == "crash_after"

    def unsent_buckets(self) -> set[int]:
        return {r.bucket for r in self.pending.values()} | {
            r.bucket for b in self.batches if b.state == "CLAIMED" for r in b.rows}


def expected_message(batch: Batch) -> dict:
    newest: dict[str, Row] = {}
    for row in batch.rows:
        if row.item not in newest or row.position > newest[row.item].position:
            newest[row.item] = row
    quantities: dict[str, int] = {}
    for row in newest.values():
        for sku, quantity in row.items:
            quantities[sku] = quantities.get(sku, 0) + quantity
    return {
        "group_key": batch.group, "flush_reason": batch.reason, "item_ids": sorted(newest),
        "items": [{"sku": s, "quantity": quantities[s]} for s in sorted(quantities)],
        "event_count": sum(r.merged for r in batch.rows),
        "members": sorted((p.topic, p.partition, p.offset) for p in batch.members),
    }


def message_view(message: dict) -> dict:
    return {
        "group_key": message["group_key"], "flush_reason": message["flush_reason"],
        "item_ids": message["item_ids"], "items": message["items"], "event_count": message["event_count"],
        "members": sorted((m["topic"], m["partition"], m["offset"]) for m in message["members"]),
    }


records = st.tuples(
    st.sampled_from(GROUPS), st.sampled_from(ITEMS), st.sampled_from([0, 1]),
    st.sampled_from([T0, DECEMBER]), st.lists(st.tuples(st.sampled_from(["S1", "S2"]), st.integers(0, 5)),
                                              max_size=2),
    st.booleans() | st.just(True),  # valid (mostly) or poison
)


class Pipeline(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store: MySQLStore = _shared["store"]
        directory: Path = _shared["directory"]
        with self.store.transaction() as cur:
            cur.execute("SHOW TABLES")
            tables = [next(iter(row.values())) for row in cur.fetchall()]
            for table in tables:
                if table != "schema_migrations":
                    cur.execute(f"DELETE FROM {table}")
        if _shared.pop("partitions_changed", False):  # back to the layout of a migration at T0
            _restore_partitions(self.store)
        self.store.migrate(T0)  # a no-op when the tables are there
        self.sink_path = directory / "batches.jsonl"
        self.dead_letter_path = directory / "dead-letter.jsonl"
        for path in (self.sink_path, self.dead_letter_path):
            path.unlink(missing_ok=True)
        self.clock = ManualClock(T0)
        self.sink = CrashingSink(FileSink(self.sink_path))
        dead_letter = FileDeadLetter(self.dead_letter_path)
        self.ingest_service = IngestService(self.store, dead_letter, FieldNames(), 256 * 1024, self.clock)
        self.flush = FlushService(self.store, self.sink, dead_letter, POLICY, self.clock, max_attempts=MAX_ATTEMPTS)
        self.model = Model()
        self.offsets = {0: 100, 1: 100}
        self.sent_records: list[tuple[KafkaRecord, bool]] = []
        self.jumped = False

    # -- rules -------------------------------------------------------------------------------

    @rule(batch=st.lists(records, min_size=1, max_size=4))
    def ingest(self, batch) -> None:
        fresh = []
        for group, item, partition, timestamp, items, valid in batch:
            self.offsets[partition] += 1
            value = order_value(group, item, tuple(items)) if valid else b"{not json"
            fresh.append((KafkaRecord(TOPIC, partition, self.offsets[partition], timestamp, b"k", value), valid))
        self._ingest(fresh)

    @precondition(lambda self: self.sent_records)
    @rule(data=st.data())
    def replay(self, data) -> None:
        """Lambda re-delivers records already processed (after a failure elsewhere in the batch)."""
        chosen = data.draw(st.lists(st.sampled_from(self.sent_records), min_size=1, max_size=4))
        self._ingest(chosen)

    @rule(ms=st.sampled_from([1_000, 30_000, 61_000, 301_000]))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(mode=st.sampled_from(["ok", "ok", "crash_before", "crash_after", "down"]),
          wait_ms=st.sampled_from([0, 61_000, 301_000]))
    def flush_tick(self, mode: str, wait_ms: int) -> None:
        self.clock.advance(wait_ms)
        self.sink.mode = mode
        crashed = False
        try:
            self.flush.tick()
        except Crash:
            crashed = True
        finally:
            self.sink.mode = "ok"
        assert crashed == self.model.tick(self.clock.now_ms(), mode)
        event(f"flush tick: {mode}, {'crashed' if crashed else 'returned'}")

    @rule(months_later=st.booleans())
    def cleanup(self, months_later: bool) -> None:
        """Cleanup now, or once per example 130 days later (old partitions expire)."""
        if months_later and not self.jumped:
            self.jumped = True
            self.clock.advance(130 * 86_400_000)
        before = self.store.partitions()
        bounds = {p.name: (before[i - 1].less_than if i else None, p.less_than) for i, p in enumerate(before)}
        now = self.clock.now_ms()
        report = CleanupService(self.store, self.clock, retention_months=3, partitions_ahead=1).run()
        if report.dropped:
            _shared["partitions_changed"] = True
        keep_from = months_after(bucket_of(now), -3)
        event(f"cleanup: {'dropped' if report.dropped else 'nothing dropped'}, {'refused' if report.refused else 'none refused'}")
        unsent = self.model.unsent_buckets()
        for name in report.dropped:
            low, high = bounds[name]
            assert high is not None and high <= keep_from, name  # expired only
            assert not any((low is None or b >= low) and b < high for b in unsent), name  # nothing unsent
            # Replay protection is one high-water offset per partition, which no drop removes:
            # records of a dropped month may still be replayed, and stay no-ops.
        for refused in report.refused:
            low, high = bounds[refused.partition]
            assert any((low is None or b >= low) and b < high for b in unsent), refused

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def buffer_matches_the_model(self) -> None:
        with self.store.transaction() as cur:
            cur.execute(
                "SELECT r.bucket, r.group_key, r.item_id, r.src_topic, r.src_partition, r.src_offset, r.items,"
                " r.first_seen_ms, r.last_update_ms, r.merged_events, r.status, r.batch_id, b.state"
                " FROM buffer_rows r LEFT JOIN batches b ON b.batch_id = r.batch_id"
                " WHERE r.status = 'PENDING' OR b.state = 'CLAIMED' ORDER BY r.id")
            rows = cur.fetchall()
        pending = {
            (r["bucket"], r["group_key"], r["item_id"]): (
                SourcePosition(r["src_topic"], r["src_partition"], r["src_offset"]),
                tuple(tuple(i) for i in json.loads(r["items"])), r["first_seen_ms"], r["last_update_ms"],
                r["merged_events"])
            for r in rows if r["status"] == "PENDING"
        }
        assert len(pending) == sum(r["status"] == "PENDING" for r in rows)  # S4
        assert pending == {k: (r.position, r.items, r.first_seen, r.last_update, r.merged)
                           for k, r in self.model.pending.items()}
        claimed: dict[str, set[SourcePosition]] = {}
        for r in rows:
            if r["status"] != "PENDING":
                claimed.setdefault(r["batch_id"], set()).add(
                    SourcePosition(r["src_topic"], r["src_partition"], r["src_offset"]))
        assert sorted(map(sorted, claimed.values())) == sorted(
            sorted(b.members) for b in self.model.batches if b.state == "CLAIMED")

    @invariant()
    def published_batches_match_the_model(self) -> None:
        messages = FileSink(self.sink_path).read()
        by_id: dict[str, dict] = {}
        for message in messages:
            first = by_id.setdefault(message["batch_id"], message)
            assert message == first  # a re-publish carries the same id and the same bytes
        owner: dict[tuple, str] = {}
        for batch_id, message in by_id.items():
            for member in message["members"]:
                key = (member["topic"], member["partition"], member["offset"])
                assert owner.setdefault(key, batch_id) == batch_id  # D: never under two ids
        canonical = functools.partial(json.dumps, sort_keys=True)  # an order independent of key order
        published = sorted((message_view(m) for m in by_id.values()), key=canonical)
        expected = sorted((expected_message(b) for b in self.model.batches if b.published), key=canonical)
        assert published == expected

    @invariant()
    def poison_is_dead_lettered(self) -> None:
        entries = FileDeadLetter(self.dead_letter_path).read()
        assert {SourcePosition(**e["source"]) for e in entries} == self.model.poison
        assert all(e["reason"] == "not_json" for e in entries)

    def _ingest(self, chosen: list[tuple[KafkaRecord, bool]]) -> None:
        outcome = self.ingest_service.ingest([r for r, _ in chosen])
        assert outcome.failed == []  # every dependency is up
        for record, valid in chosen:
            self.model.ingest(record, valid, self.clock.now_ms())
        self.sent_records.extend(c for c in chosen if c not in self.sent_records)


Pipeline.TestCase.settings = settings(
    max_examples=int(os.environ.get("MODEL_EXAMPLES", str(DEFAULT_EXAMPLES))), stateful_step_count=10, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestPipeline = Pipeline.TestCase
