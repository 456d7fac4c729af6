"""One reference for the buffer rules, and every other implementation proven equal to it.

The reference: :class:`~consolidator.rules.buffer.PendingBuffer` (one group's PENDING rows: S1
replays, S2 coalescing per item and month, S3 a claimed row leaves) with
:func:`~consolidator.rules.policy.plan_group` (claims, splits under the byte cap, rate limit, TTL), on
the serverless tick schedule (:func:`~consolidator.spark.replay.simulate_group`).

The variants, each fed the same random history and policy:

- ``mysql``: the Lambda path's buffer (``store/buffer.py``, ``store/batches.py``,
  ``store/claims.py``, ``store/rate.py``, ``store/expiry.py``) through ``IngestService`` (each
  record at its timestamp) and ``FlushService`` (a tick at every tick of the grid);
- ``fast``: :func:`~consolidator.spark.replay.simulate_group_fast` (plain policies);
- ``columnar``: :func:`~consolidator.spark.columnar.simulate_chunk` (plain policies; a group it
  hands back must be one where a batch is full);
- ``pending``: :class:`~consolidator.spark.pending.PendingTable`, the streaming job's state under
  a plain policy, on the serverless schedule.

Each must give the reference's batches (group, reason, flush time, members, id and message
bytes), expired rows and replay count. Histories: records in arrival order, per partition
offsets rising with time (as Kafka delivers them), redeliveries of earlier records, items that
repeat (coalescing), timestamps across a month boundary (rows of one item split by bucket).
Policies: plain, or with a rate limit, a TTL and a byte cap, alone or together.

The streaming job's own step, for any event shape, is compared with the ``mysql`` variant in
``test_buffer_rules_shape.py`` (which shares this module's database, sink and strategies).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pymysql
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support import MYSQL_HOST, MYSQL_PASSWORD, MYSQL_PORT, MYSQL_USER, order_value

from consolidator.rules.batch import build_message, encode
from consolidator.rules.buffer import BufferedEvent
from consolidator.rules.clock import ManualClock
from consolidator.rules.events import FieldNames, KafkaRecord, decode
from consolidator.rules.policy import Policy, RateLimit, next_tick_ms
from consolidator.rules.simulation import simulate_group
from consolidator.services.flush import FlushService
from consolidator.services.ingest import IngestService
from consolidator.sinks.deadletter import FileDeadLetter
from consolidator.spark.columnar import make_chunk, simulate_chunk
from consolidator.spark.pending import EVENT_SCHEMA, PendingTable
from consolidator.spark.replay import simulate_group_fast
from consolidator.store.mysql import ConnectionParams, MySQLStore

MONTH_END = 1_798_761_600_000  # 2027-01-01T00:00:00Z: histories straddle a bucket boundary
TOPIC = "orders"
MAX_EVENT_BYTES = 1 << 20


@dataclass(frozen=True)
class Rec:
    """One Kafka record of a history."""

    group: str
    partition: int
    offset: int
    ts: int
    item: str
    items: tuple[tuple[str, int], ...]

    def kafka(self) -> KafkaRecord:
        value = order_value(location=self.group, order=self.item, items=self.items)
        return KafkaRecord(TOPIC, self.partition, self.offset, self.ts, self.group.encode(), value)

    def buffered(self) -> BufferedEvent:
        event = decode(self.kafka(), FieldNames(), MAX_EVENT_BYTES)
        return BufferedEvent(event.position, self.ts, event.item_id, event.items)

    def items_json(self) -> str:
        return json.dumps([list(pair) for pair in self.buffered().items], separators=(",", ":"))


@st.composite
def histories(draw) -> list[Rec]:
    records: list[Rec] = []
    at = MONTH_END - draw(st.integers(0, 120)) * 1_000
    offsets = [0, 0]
    for _ in range(draw(st.integers(0, 24))):
        if records and draw(st.integers(0, 9)) == 0:
            records.append(draw(st.sampled_from(records)))  # a redelivery: the same record again
            continue
        at += draw(st.sampled_from([0, 400, 1_000, 3_000, 9_000, 30_000, 70_000]))
        partition = draw(st.integers(0, 1))
        offsets[partition] += draw(st.integers(1, 2))
        records.append(Rec(draw(st.sampled_from(["WH-1", "WH-2"])), partition, offsets[partition], at,
                           draw(st.sampled_from(["A", "B", "C"])),
                           ((draw(st.sampled_from(["SKU-1", "SKU-2"])), draw(st.integers(1, 9))),)))
    return records


def _policies(plain: bool):
    limits = st.none() if plain else st.one_of(st.none(), st.builds(RateLimit, st.integers(1, 2),
                                                                      st.sampled_from([20_000, 90_000])))
    return st.builds(
        Policy,
        debounce_ms=st.sampled_from([2_000, 10_000, 60_000]),
        hard_window_ms=st.sampled_from([20_000, 120_000]),
        max_batch_size=st.integers(1, 5),
        tick_interval_ms=st.sampled_from([5_000, 30_000]),
        max_batch_bytes=st.none() if plain else st.one_of(st.none(), st.sampled_from([700, 900, 1_500])),
        rate_limit=limits,
        ttl_ms=st.just(0) if plain else st.sampled_from([0, 20_000, 45_000, 150_000]),
    )


# -- the reference ---------------------------------------------------------------------------

@dataclass
class Outcome:
    batches: list[tuple]  # (group, reason, flushed_at_ms, member positions sorted, message bytes), sorted
    expired: list[str]  # the expired rows' dead-letter entries as JSON, sorted
    replayed: int


def _positions(positions) -> tuple:
    return tuple(sorted(tuple(p) for p in positions))


def reference(history: list[Rec], policy: Policy, simulate=simulate_group) -> Outcome:
    batches, expired, replayed = [], [], 0
    for group in sorted({r.group for r in history}):
        result = simulate(group, [r.buffered() for r in history if r.group == group], policy)
        batches += [(group, str(b.reason), b.flushed_at_ms, _positions(m.position for m in b.members),
                     encode(b.message)) for b in result.batches]
        expired += [json.dumps(entry, sort_keys=True) for entry in result.expired]
        replayed += result.replayed
    return Outcome(sorted(batches), sorted(expired), replayed)


# -- the variants ----------------------------------------------------------------------------

class _Sink:
    """Keeps each published message with the time of the tick that published it."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock, self.published = clock, []

    def publish(self, batches) -> dict[int, str]:
        self.published += [(self.clock.now_ms(), b.body) for b in batches]
        return {}

    def close(self) -> None:
        pass


def run_mysql(store: MySQLStore, scratch: Path, history: list[Rec], policy: Policy) -> Outcome:
    """Each record ingested at its timestamp, in arrival order; a flush tick at every tick of
    the grid (after the records up to it) until nothing is PENDING or CLAIMED."""
    clock = ManualClock(MONTH_END)
    dead = FileDeadLetter(scratch / f"{uuid.uuid4().hex}.jsonl")
    ingest = IngestService(store, dead, FieldNames(), MAX_EVENT_BYTES, clock)
    sink = _Sink(clock)
    flush = FlushService(store, sink, dead, policy, clock)
    replayed, index = 0, 0
    tick = next_tick_ms(min((r.ts for r in history), default=MONTH_END), policy)
    for _ in range(10_000):
        while index < len(history) and history[index].ts <= tick:
            clock.set(history[index].ts)
            outcome = ingest.ingest([history[index].kafka()])
            assert not outcome.failed
            replayed += outcome.replayed
            index += 1
        clock.set(tick)
        flush.tick()
        if index == len(history) and not store.row_counts().keys() & {"PENDING", "CLAIMED"}:
            break
        tick += policy.tick_interval_ms
    else:
        raise AssertionError("the buffer never drained")
    batches = []
    for at, body in sink.published:
        message = json.loads(body)
        positions = _positions((m["topic"], m["partition"], m["offset"]) for m in message["members"])
        batches.append((message["group_key"], message["flush_reason"], at, positions, body))
    expired = [json.dumps(entry, sort_keys=True) for entry in (dead.read() if dead.path.exists() else [])]
    return Outcome(sorted(batches), sorted(expired), replayed)


def run_columnar(history: list[Rec], policy: Policy) -> tuple[list[tuple], set[str], int]:
    """The columnar batches as (group, reason, flushed_at_ms, message bytes), the groups it
    handed back, and the replays it found."""
    chunk = make_chunk([r.group for r in history], [r.ts for r in history], [TOPIC] * len(history),
                       [r.partition for r in history], [r.offset for r in history],
                       [r.buffered().item_id for r in history], [r.items_json() for r in history])
    found, handed_back = simulate_chunk(chunk, policy)
    batches = sorted((b["group_key"], b["reason"], b["flushed_at_ms"], b["body"].encode()) for b in found.to_pylist())
    return batches, {chunk.group_keys[i] for i in handed_back}, int((~chunk.first).sum())


def run_pending(history: list[Rec], policy: Policy) -> list[tuple]:
    """The streaming state on the serverless schedule. Spark's checkpoint feeds each offset
    once, so the table gets each record once (redeliveries are the reference's replays)."""
    once = sorted({(r.partition, r.offset): r for r in reversed(history)}.values(),
                  key=lambda r: (r.ts, r.partition, r.offset))
    table, batches, index = PendingTable.load(None), [], 0
    while index < len(once) or len(table):
        due = table.next_due_ms(policy)
        tick = None if due is None else next_tick_ms(due, policy)
        if index < len(once) and (tick is None or once[index].ts <= tick):
            r = once[index]
            index += 1
            table.ingest(pa.Table.from_pylist([{"group_key": r.group, "topic": TOPIC, "partition": r.partition,
                                                "offset": r.offset, "timestamp_ms": r.ts,
                                                "item_id": r.buffered().item_id, "items": r.items_json()}],
                                              schema=EVENT_SCHEMA), r.ts)
            continue
        for group, plan in table.plan_due(tick, policy):
            for claim in plan.claims:
                message = build_message(group, claim.rows, claim.reason, flushed_at_ms=tick)
                batches.append((group, str(claim.reason), tick, _positions(m.position for m in claim.rows),
                                encode(message)))
    return sorted(batches)


# -- the one shared property test ------------------------------------------------------------

@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One migrated database for every example (emptied in between) and a scratch directory."""
    name = f"consolidator_test_{uuid.uuid4().hex[:10]}"
    admin = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user=MYSQL_USER, password=MYSQL_PASSWORD,
                            autocommit=True)
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    store = MySQLStore(ConnectionParams(MYSQL_HOST, MYSQL_PORT, MYSQL_USER, MYSQL_PASSWORD, name))
    store.migrate(MONTH_END)
    try:
        yield store, tmp_path_factory.mktemp("buffer-rules")
    finally:
        store.close()
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


def _empty(store: MySQLStore) -> None:
    with store.transaction() as cur:
        for table in ("buffer_rows", "applied_positions", "partition_offsets", "batches", "group_rate_state",
                      "group_rate_limits", "topic_epochs", "completion_trackers", "completion_items"):
            cur.execute(f"DELETE FROM {table}")


VARIANTS = ["mysql", "fast", "columnar", "pending"]


@pytest.mark.parametrize("variant", VARIANTS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data())
def test_every_variant_gives_the_reference_outcome(shared, variant, data):
    history = data.draw(histories(), "history")
    policy = data.draw(_policies(plain=variant != "mysql"), "policy")
    expected = reference(history, policy)
    event(f"batches: {min(len(expected.batches), 3)}+, expired: {bool(expected.expired)},"
          f" replays: {bool(expected.replayed)}, split or limited: {policy.max_batch_bytes is not None}"
          f" {policy.rate_limit is not None}, ttl: {policy.ttl_ms}")
    if variant == "mysql":
        store, scratch = shared
        _empty(store)
        assert run_mysql(store, scratch, history, policy) == expected
    elif variant == "fast":
        assert reference(history, policy, simulate_group_fast) == expected
    elif variant == "columnar":
        batches, handed_back, replayed = run_columnar(history, policy)
        for group in handed_back:  # left to the reference path: only where a batch is full
            assert any(b[0] == group and len(b[3]) == policy.max_batch_size for b in expected.batches)
        assert batches == sorted((g, r, t, body) for g, r, t, _, body in expected.batches if g not in handed_back)
        assert replayed == expected.replayed
    else:
        assert run_pending(history, policy) == expected.batches


def test_each_batch_of_a_claim_the_byte_cap_splits_counts_against_the_rate_limit(shared):
    """Two rows that fit a 700-byte message one at a time, claimed together (full), 1 batch per
    20 s: the second batch of the split claim waits for the rate, on the Lambda path and in the
    reference alike (the reference once published both batches in the same tick)."""
    history = [Rec("WH-1", 0, offset, MONTH_END, item, (("S" * 250, 1),)) for offset, item in enumerate("AB")]
    policy = Policy(debounce_ms=2_000, hard_window_ms=20_000, max_batch_size=2, tick_interval_ms=5_000,
                    max_batch_bytes=700, rate_limit=RateLimit(1, 20_000))
    expected = reference(history, policy)
    assert [(reason, at - MONTH_END) for _, reason, at, _, _ in expected.batches] == [
        ("full", 0), ("hard_window", 20_000)]
    store, scratch = shared
    _empty(store)
    assert run_mysql(store, scratch, history, policy) == expected
