"""The streaming job's own step against the Lambda path, for any event shape.

Next to ``test_buffer_rules.py`` (whose database, sink and policies it shares): a random spec
(``random_shapes.random_shape``: aggregation outputs and member payloads) or the default shape, a
random history of events it reads, a random policy, and micro-batches at random processing times.
Each micro-batch goes

- through the Lambda path: ``IngestService`` with the clock at the micro-batch's time, then a
  ``FlushService`` tick at that time (the MySQL buffer);
- through the streaming job's step exactly as its processor runs it, without a SparkSession:
  ``packing.pack`` (decode and shard of every record, poison to the poison shard), per shard
  ``ShardStep.input_rows`` with the shard's state row, then ``ShardStep.timer`` for every timer
  at or before the micro-batch's time (Spark's order: input rows, then expired timers). The step
  comes from ``step.job_step``, the constructor ``streaming.aggregate`` uses, and every state row
  makes a round trip through Arrow and pandas (the state schema's types, a null long as NaN)
  between calls. Spark's checkpoint feeds each offset once, so the step gets a redelivered record
  once; the Lambda path gets it again and must find it a replay.

Both must give the same batches (group, batch id, flush time, message bytes), the same expired
entries and the same poison (reason, detail, position).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import sys
import uuid
from collections import defaultdict
from fractions import Fraction

import orjson
import pyarrow as pa
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from random_shapes import random_history, random_shape
from test_buffer_rules import (  # noqa: F401
    MAX_EVENT_BYTES,
    MONTH_END,
    _empty,
    _policies,
    _Sink,
    histories,
    shared,
)

from consolidator.rules.clock import ManualClock
from consolidator.rules.events import FieldNames, KafkaRecord
from consolidator.rules.policy import Policy, RateLimit
from consolidator.rules.shape import REFERENCE_SHAPE, Shape, parse_outputs, parse_payload
from consolidator.services.flush import FlushService
from consolidator.services.ingest import IngestService
from consolidator.sinks.deadletter import FileDeadLetter
from consolidator.spark.delivery import BATCH
from consolidator.spark.packing import pack, unpack
from consolidator.spark.shards import POISON_SHARD
from consolidator.spark.step import DEAD_LETTER, EXPIRED, ShardStep, dead_letters, job_step

STATE = pa.schema([("groups", pa.string()), ("timer_ms", pa.int64()), ("shards", pa.int32()), ("rows", pa.binary())])
GAPS_MS = [0, 500, 2_000, 7_000, 30_000, 90_000]  # between micro-batches (processing time)


def micro_batches(history: list[KafkaRecord], schedule: random.Random) -> list[tuple[int, list[KafkaRecord]]]:
    """Processing times and the records each micro-batch reads: in arrival order, each record in
    a micro-batch at or after its timestamp, the rest of the schedule drawn at random."""
    at = min((r.timestamp_ms for r in history), default=MONTH_END) + schedule.choice(GAPS_MS)
    out: list[tuple[int, list[KafkaRecord]]] = [(at, [])]
    for record in history:
        while record.timestamp_ms > at:
            at += schedule.choice(GAPS_MS[1:])
            out.append((at, []))
        out[-1][1].append(record)
    return out


def _roundtrip(state: tuple) -> tuple:
    """A state row as Spark's pandas state API hands it back."""
    frame = pa.Table.from_pylist([dict(zip(STATE.names, state, strict=True))], schema=STATE).to_pandas()
    return tuple(frame.iloc[0])


class Stream:
    """The streaming job's per-shard state and timers around :class:`ShardStep`."""

    def __init__(self, step: ShardStep, names: FieldNames, shards: int) -> None:
        self.step, self.names, self.shards = step, names, shards
        self.state: dict[int, tuple] = {}
        self.timers: dict[int, set[int]] = defaultdict(set)
        self.seen: set[tuple] = set()
        self.rows: list[tuple] = []

    def _apply(self, shard: int, result, now_ms: int) -> None:
        if result.delete_timer is not None:
            self.timers[shard].remove(result.delete_timer)
        if result.register_timer is not None:
            self.timers[shard].add(result.register_timer)
        if result.state is None:
            self.state.pop(shard, None)
        else:
            self.state[shard] = _roundtrip(result.state)
        self.rows += [(now_ms, *row) for row in result.rows]

    def micro_batch(self, now_ms: int, records: list[KafkaRecord]) -> None:
        fresh = []
        for r in records:  # the checkpoint feeds each offset once
            if (r.partition, r.offset) not in self.seen:
                self.seen.add((r.partition, r.offset))
                fresh.append(r)
        if fresh:
            n = len(fresh)
            batch = pa.RecordBatch.from_pydict({
                "topic": [r.topic for r in fresh], "partition": [r.partition for r in fresh],
                "offset": [r.offset for r in fresh], "timestamp_ms": [r.timestamp_ms for r in fresh],
                "key": [r.key for r in fresh], "value": [r.value for r in fresh],
                "group_key": pa.nulls(n, pa.string()), "item_id": pa.nulls(n, pa.string()),
                "items": pa.nulls(n, pa.string()), "shard": pa.nulls(n, pa.int32())})
            for packed in pack([batch], names=self.names, max_event_bytes=MAX_EVENT_BYTES, shards=self.shards):
                for shard, blob in zip(*(packed.column(c).to_pylist() for c in ("shard", "records")), strict=True):
                    part = unpack([blob])
                    if shard == POISON_SHARD:
                        self.rows += [(now_ms, *row) for row in dead_letters(part, now_ms)]
                    else:
                        self._apply(shard, self.step.input_rows(self.state.get(shard), part, now_ms), now_ms)
        for shard in sorted(self.timers):
            for timer in sorted(t for t in self.timers[shard] if t <= now_ms):
                self.timers[shard].remove(timer)  # Spark drops an expired timer
                self._apply(shard, self.step.timer(self.state.get(shard), now_ms), now_ms)

    def busy(self) -> bool:
        return any(self.timers.values())


def _poison(entries) -> list[tuple]:
    return sorted({(e["reason"], e.get("detail"), e["source"]["partition"], e["source"]["offset"]) for e in entries})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data(), rng=st.randoms(use_true_random=False), schedule=st.randoms(use_true_random=False))
def test_the_streaming_step_gives_the_lambda_batches_for_any_shape(shared, data, rng, schedule):  # noqa: F811
    generic = data.draw(st.booleans(), "generic shape")
    if generic:
        shape = random_shape(rng)
        names = FieldNames(group_key="tenant", item_id="user", shape=shape)
        history = random_history(rng, MONTH_END - rng.randrange(0, 300_000), count=rng.randrange(1, 40))
    else:
        shape, names = REFERENCE_SHAPE, FieldNames()
        history = [r.kafka() for r in data.draw(histories(), "history")]
    policy: Policy = data.draw(_policies(plain=data.draw(st.booleans(), "plain")), "policy")
    step = job_step(policy, names, shards := data.draw(st.integers(1, 3), "shards"))

    outcome = both_paths(shared, names, history, policy, step, shards, schedule)
    event(f"generic: {generic}, plain step: {step.plain}, batches: {min(len(outcome.lambda_batches), 3)}+,"
          f" expired: {bool(outcome.lambda_expired)}")
    outcome.check()


def test_a_claim_the_byte_cap_splits_counts_each_batch_against_the_rate_limit(shared):  # noqa: F811
    """The case Hypothesis found (shrunk): two members that fit a 700-byte message one at a time,
    a full claim of both, 1 batch per 20 s. The Lambda path claims the second batch of the
    split claim only when the rate allows (20 s later); the step once emitted both at once."""
    shape = Shape(parse_outputs('[{"name": "n", "op": "count"}]'), True, None)
    names = FieldNames(group_key="tenant", item_id="user", shape=shape)
    history = [KafkaRecord("events", 0, offset, MONTH_END, b"T0", orjson.dumps(
        {"tenant": "T0", "user": f"u{offset}", "note": "x" * 200})) for offset in range(2)]
    policy = Policy(debounce_ms=2_000, hard_window_ms=20_000, max_batch_size=2, tick_interval_ms=5_000,
                    max_batch_bytes=700, rate_limit=RateLimit(1, 20_000))
    outcome = both_paths(shared, names, history, policy, job_step(policy, names, 1), 1, random.Random(0))
    (first, t0), (second, t1) = sorted((json.loads(body)["flush_reason"], t) for _, _, t, body in
                                       outcome.lambda_batches)
    assert (first, second) == ("full", "hard_window") and t1 - t0 >= 20_000
    outcome.check()


def test_a_batch_under_the_byte_cap_then_keeps_its_sums_within_int64(shared):  # noqa: F811
    """Sums that leave int64 and come back (2^62, 1, 2^62, -2^62) with a byte cap that holds
    three members: the Lambda path takes the prefix under the cap, then of it the prefix whose
    sums fit (two members); the step once took the int64 prefix of the whole claim (all four,
    their sum fits) and then the byte cap's three, a batch whose sum is 2^63 + 1."""
    shape = Shape(parse_outputs('[{"name": "s", "op": "sum", "path": "amount"}]'), False, None)
    names = FieldNames(group_key="tenant", item_id="user", shape=shape)
    history = [KafkaRecord("events", 0, offset, MONTH_END, b"T0", orjson.dumps(
        {"tenant": "T0", "user": f"u{offset}", "amount": amount}))
        for offset, amount in enumerate([2**62, 1, 2**62, -2**62])]
    policy = Policy(debounce_ms=2_000, hard_window_ms=20_000, max_batch_size=4, tick_interval_ms=5_000,
                    max_batch_bytes=560)
    outcome = both_paths(shared, names, history, policy, job_step(policy, names, 1), 1, random.Random(0))
    messages = sorted((json.loads(body) for *_, body in outcome.lambda_batches), key=lambda m: m["item_ids"])
    assert [(m["item_ids"], m["aggregates"]["s"]) for m in messages] == [
        (["u0", "u1"], 2**62 + 1), (["u2", "u3"], 0)]
    outcome.check()


#: Numbers at the edges (literals as a producer writes them): the smallest subnormal and normal,
#: the largest double, -0.0, 2^53+1 (not a double), the ends of int64 and just past them (poison
#: where a number is read), past 64 bits (poison everywhere the shape reads or keeps it).
EDGE_LITERALS = ["0", "-0.0", "0.0", "5e-324", "-5e-324", "2.2250738585072014e-308", "2.225073858507201e-308",
                 "1.7976931348623157e308", "-1.7976931348623157e308", "1.7e308", "-1.7e308", "9007199254740993",
                 "-9007199254740993", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
                 "-9223372036854775809", "18446744073709551615", "18446744073709551616", "100000000000000000000",
                 "1e20", "0.1", "1", "-1"]
_NUMBER_SPECS = [('{"name": "s", "op": "sum", "path": "v"}', "v"), ('{"name": "lo", "op": "min", "path": "v"}', "v"),
                 ('{"name": "hi", "op": "max", "path": "v"}', "v"), ('{"name": "f", "op": "first", "path": "v"}', "v"),
                 ('{"name": "l", "op": "last", "path": "w"}', "w"), ('{"name": "d", "op": "distinct", "path": "w"}', "w"),
                 ('{"name": "g", "op": "group_sum", "path": "lines", "by": "code", "sum": ["n"]}', "lines")]


def _number_literals() -> st.SearchStrategy[str]:
    doubles = st.floats(allow_nan=False, allow_infinity=False).map(repr)
    integers = st.integers(-(2**65), 2**65).map(str)
    return st.one_of(st.sampled_from(EDGE_LITERALS), doubles, integers)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data(), schedule=st.randoms(use_true_random=False))
def test_random_and_edge_numbers_give_the_same_batches_and_poison_on_both_engines(shared, data, schedule):  # noqa: F811
    """Random finite doubles, integers near and past 64 bits, and the edge numbers, as literals,
    under sum, min, max, first, last, distinct and group_sum, with and without a payload: the
    Lambda path and the streaming step give the same batches, bytes and poison; every batch's
    numbers are within bounds (integers within 64 bits, doubles finite), nothing raises."""
    specs = data.draw(st.lists(st.sampled_from(_NUMBER_SPECS), min_size=1, max_size=4, unique=True), "outputs")
    payload = data.draw(st.sampled_from(["none", "full", '["v", "lines"]']), "payload")
    full, paths = parse_payload(payload)
    shape = Shape(parse_outputs(f"[{', '.join(spec for spec, _ in specs)}]"), full, paths)
    names = FieldNames(group_key="tenant", item_id="user", shape=shape)
    literal = _number_literals()
    history, poison = [], set()
    for offset in range(data.draw(st.integers(1, 8), "events")):
        tenant, user = data.draw(st.sampled_from(["T0", "T1"])), data.draw(st.sampled_from(["u0", "u1", "u2", "u3"]))
        v, w = (data.draw(literal | st.just("null")) for _ in "vw")  # null: absent for the outputs, kept by a payload
        lines = [(data.draw(st.sampled_from("ab")), data.draw(literal)) for _ in range(data.draw(st.integers(0, 3)))]
        value = (f'{{"tenant": "{tenant}", "user": "{user}", "v": {v}, "w": {w}, "lines": ['
                 + ",".join(f'{{"code": "{code}", "n": {n}}}' for code, n in lines) + "]}")
        history.append(KafkaRecord("events", 0, offset, MONTH_END + 1_000 * offset, tenant.encode(), value.encode()))
        if _poison_by_the_contract(specs, full, paths, v, w, lines):
            poison.add(offset)
    policy: Policy = data.draw(_policies(plain=data.draw(st.booleans(), "plain")), "policy")
    outcome = both_paths(shared, names, history, policy, job_step(policy, names, 1), 1, schedule)
    outcome.check()
    assert {offset for *_, offset in outcome.lambda_poison} == poison
    for *_, body in outcome.lambda_batches:
        for number in _numbers(orjson.loads(body)):
            assert (type(number) is int and -(2**63) <= number < 2**64) or math.isfinite(number), number
    event(f"batches: {min(len(outcome.lambda_batches), 3)}+, poison: {bool(outcome.lambda_poison)}")


def _poison_by_the_contract(specs, full: bool, paths, v: str, w: str, lines: list[tuple[str, str]]) -> bool:
    """docs/guide/events.md, "Numbers", from the literals alone: an integer literal outside int64 where
    an output reads a number, beyond 64 bits where the shape keeps any value, a group of
    ``lines`` whose sum alone leaves int64 or the double range."""
    def integer(text: str) -> int | None:
        return int(text) if text.lstrip("-").isdigit() else None

    def outside(text: str, low: int, high: int) -> bool:
        number = integer(text)
        return number is not None and not low <= number <= high

    int64, any64 = (-(2**63), 2**63 - 1), (-(2**63), 2**64 - 1)
    read = {"v": [v], "w": [w], "lines": [n for _, n in lines]}
    for spec, path in specs:
        keeps_any = '"first"' in spec or '"last"' in spec
        if any(outside(text, *(any64 if keeps_any else int64)) for text in read[path]):
            return True
    kept = [v, w, *read["lines"]] if full else [v, *read["lines"]] if paths else []
    if any(outside(text, *any64) for text in kept):
        return True
    if any(path == "lines" for _, path in specs):
        for code in "ab":
            texts = [n for c, n in lines if c == code]
            if any(integer(t) is None for t in texts):  # a double among them: the exact sum, as a double
                if texts and abs(sum(Fraction(float(t)) for t in texts)) >= Fraction(sys.float_info.max) + 2**970:
                    return True
            elif not int64[0] <= sum(int(t) for t in texts) <= int64[1]:
                return True
    return False


def _numbers(value: object):
    if type(value) is dict:
        for item in value.values():
            yield from _numbers(item)
    elif type(value) is list:
        for item in value:
            yield from _numbers(item)
    elif type(value) in (int, float):
        yield value


@dataclasses.dataclass
class Outcome:
    """What each path produced: batches as (group, batch id, flush time, bytes), expired entries
    as JSON, and the poison entries."""

    lambda_batches: list[tuple]
    stream_batches: list[tuple]
    lambda_expired: list[str]
    stream_expired: list[str]
    lambda_poison: list[tuple]
    stream_poison: list[tuple]

    def check(self) -> None:
        assert self.stream_batches == self.lambda_batches  # same groups, ids, flush times and bytes
        assert self.stream_expired == self.lambda_expired
        assert self.stream_poison == self.lambda_poison


def both_paths(shared, names: FieldNames, history: list[KafkaRecord], policy: Policy,  # noqa: F811
               step: ShardStep, shards: int, schedule: random.Random) -> Outcome:
    """``history`` in micro-batches (:func:`micro_batches`) through the Lambda path and the
    streaming step, then empty micro-batches until both have drained."""
    store, scratch = shared
    _empty(store)
    clock = ManualClock(MONTH_END)
    dead = FileDeadLetter(scratch / f"{uuid.uuid4().hex}.jsonl")
    ingest = IngestService(store, dead, names, MAX_EVENT_BYTES, clock)
    sink = _Sink(clock)
    flush = FlushService(store, sink, dead, policy, clock, names)
    stream = Stream(step, names, shards)
    batches = micro_batches(history, schedule)
    now = batches[-1][0]
    for _ in range(5_000):  # the history's micro-batches, then empty ones until both drained
        if batches:
            now, records = batches.pop(0)
        else:
            now, records = now + schedule.choice(GAPS_MS[1:]), []
        clock.set(now)
        if records:
            assert not ingest.ingest(records).failed
        flush.tick()
        stream.micro_batch(now, records)
        if not batches and not stream.busy() and not store.row_counts().keys() & {"PENDING", "CLAIMED"}:
            break
    else:
        raise AssertionError("the buffers never drained")

    lambda_batches = sorted((json.loads(body)["group_key"], json.loads(body)["batch_id"], t, body)
                            for t, body in sink.published)
    stream_batches = sorted((group, batch_id, t, body.encode()) for t, kind, group, batch_id, _, body in stream.rows
                            if kind == BATCH)
    lambda_dead = dead.read() if dead.path.exists() else []
    lambda_expired = sorted(json.dumps(e, sort_keys=True) for e in lambda_dead if e["reason"] == "expired")
    stream_expired = sorted(row[-1] for row in stream.rows if row[1] == EXPIRED)
    return Outcome(lambda_batches, stream_batches, lambda_expired, stream_expired,
                   _poison(e for e in lambda_dead if e["reason"] != "expired"),
                   _poison(json.loads(row[-1]) for row in stream.rows if row[1] == DEAD_LETTER))
