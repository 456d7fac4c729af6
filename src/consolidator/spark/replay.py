"""Replay: "what would this policy have produced on last week's traffic?", as a Spark job.

Each group's records go through the reference simulation of the serverless path
(:func:`consolidator.rules.simulation.simulate_group`), or through :func:`simulate_group_fast`,
proven equal to it, under a plain policy; a plain policy's chunks of groups can also take the
columnar simulation (:mod:`consolidator.spark.columnar`).

Guarantees: deterministic (same input and policies, same batches, ids and figures); every
valid event is in exactly one batch per policy, every poison record in the dead-letter output.
A record position is assumed to identify one record (true for Kafka): duplicates of a position
inside a group are no-ops, as in the buffer's position ledger.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from consolidator.rules.batch import Member, build_message, encode
from consolidator.rules.buffer import BufferedEvent
from consolidator.rules.deadletter import poison_entry
from consolidator.rules.events import (
    DEFAULT_NAMES,
    FieldNames,
    KafkaRecord,
    PoisonEvent,
    PoisonReason,
    SourcePosition,
    bucket_of,
)
from consolidator.rules.policy import (
    GroupStats,
    Policy,
    RateLimit,
    next_due_ms,
    next_tick_ms,
    plan_batches,
)
from consolidator.rules.simulation import GroupReplay, ReplayBatch, simulate_group
from consolidator.rules.split import fit_claims
from consolidator.support.collector import collector_paused


@dataclass(frozen=True, slots=True)
class NamedPolicy:
    name: str
    policy: Policy


def policy_name(policy: Policy) -> str:
    """A readable, file-name-safe name, e.g. ``d300s-h1800s-n500-t30s``."""

    def span(ms: int) -> str:
        return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"

    name = (f"d{span(policy.debounce_ms)}-h{span(policy.hard_window_ms)}"
            f"-n{policy.max_batch_size}-t{span(policy.tick_interval_ms)}")
    if policy.rate_limit is not None:
        name += f"-r{policy.rate_limit.batches}per{span(policy.rate_limit.period_ms)}"
    if policy.ttl_ms:
        name += f"-ttl{span(policy.ttl_ms)}"
    return name


def policy_grid(debounce_ms: Sequence[int], hard_window_ms: Sequence[int], max_batch_size: Sequence[int],
                tick_interval_ms: int, rate_limits: Sequence[RateLimit | None] = (None,),
                ttl_ms: Sequence[int] = (0,)) -> list[NamedPolicy]:
    """Every combination of the candidate settings, named by :func:`policy_name`, without repeats."""
    grid: dict[str, NamedPolicy] = {}
    for debounce, hard, size, rate, ttl in itertools.product(debounce_ms, hard_window_ms, max_batch_size,
                                                             rate_limits, ttl_ms):
        policy = Policy(debounce, hard, size, tick_interval_ms, rate_limit=rate, ttl_ms=ttl)
        grid.setdefault(policy_name(policy), NamedPolicy(policy_name(policy), policy))
    if not grid:
        raise ValueError("the policy grid is empty")
    return list(grid.values())


def _arrival(event: BufferedEvent) -> tuple:
    return (event.timestamp_ms, event.position)


def simulate(group_key: str, events: Sequence[BufferedEvent], policy: Policy,
             names: FieldNames = DEFAULT_NAMES) -> GroupReplay:
    """:func:`simulate_group_fast` for a plain policy; :func:`simulate_group` (the reference)
    when a rate limit, a TTL or a byte cap takes part, which the fast path does not model."""
    plain = (policy.rate_limit is None and not policy.rate_overrides and not policy.ttl_ms
             and policy.max_batch_bytes is None and not names.event_times)
    return (simulate_group_fast if plain else simulate_group)(group_key, events, policy, names)


def simulate_group_fast(group_key: str, events: Sequence[BufferedEvent], policy: Policy,
                        names: FieldNames = DEFAULT_NAMES) -> GroupReplay:
    """Exactly :func:`simulate_group`'s batches, with fewer objects: rows are lists updated in
    place, the group statistics are kept as two integers, and :class:`Member` rows are built only
    when a tick claims. Every decision is still ``policy.py``'s (``next_due_ms``, ``plan_batches``,
    ``next_tick_ms`` on the same :class:`GroupStats`); ``tests/unit/test_simulation.py`` checks the
    equality on random histories."""
    ordered = sorted(events, key=_arrival)
    rows: dict[tuple[int, str], list] = {}  # (bucket, item) -> [position, item, items, first, last, merged, record ts]
    seen: set[SourcePosition] = set()
    batches: list[ReplayBatch] = []
    replayed = index = oldest = newest = 0
    count = len(ordered)
    while index < count or rows:
        tick = None
        if rows:
            tick = next_tick_ms(next_due_ms(GroupStats(group_key, len(rows), oldest, newest), policy), policy)
        if index < count and (tick is None or ordered[index].timestamp_ms <= tick):
            event = ordered[index]
            index += 1
            position, now = event.position, event.timestamp_ms
            if position in seen:
                replayed += 1
                continue
            seen.add(position)
            key = (bucket_of(now), event.item_id)
            row = rows.get(key)
            if row is None:
                if not rows:
                    oldest = newest = now
                rows[key] = [position, event.item_id, event.items, now, now, 1, now]
                oldest, newest = min(oldest, now), max(newest, now)
            else:
                if position > row[0]:
                    row[0], row[2], row[6] = position, event.items, now
                row[4] = max(row[4], now)
                row[5] += 1
                newest = max(newest, now)
            continue
        assert tick is not None  # the loop condition guarantees pending rows here
        keys = {row[0]: key for key, row in rows.items()}
        claims, remaining = plan_batches(group_key, [Member(*row) for row in rows.values()], tick, policy)
        claims = fit_claims(group_key, claims, tick, policy, shape=names.shape)  # split where a sum would leave its bounds
        if claims:
            rows = {keys[m.position]: list(m) for m in remaining}
            oldest = min((m.first_seen_ms for m in remaining), default=0)
            newest = max((m.last_update_ms for m in remaining), default=0)
        for reason, members in claims:
            message = build_message(group_key, members, reason, flushed_at_ms=tick, shape=names.shape,
                                    event_times=names.event_times)
            batches.append(ReplayBatch(group_key, reason, tick, tuple(members), message))
    return GroupReplay(batches, count, replayed)


# -- Spark -----------------------------------------------------------------------------------

OUTPUT_SCHEMA = (
    "kind string, policy string, group_key string, batch_id string, reason string,"
    " flushed_at_ms long, members int, event_count long, latencies_ms array<long>, body string,"
    " records_in long, replayed long"
)
BATCH, DEAD_LETTER, SUMMARY, EXPIRED = "batch", "dead_letter", "summary", "expired"
LATE_ARRIVAL = "late_arrival"  # an expired row's ``reason`` when its event was older than the TTL on arrival


def _partition_function(policies: Sequence[NamedPolicy], names: FieldNames = DEFAULT_NAMES,
                        deferred: tuple[FieldNames, int] | None = None):
    """The Arrow function over one partition of decoded records
    (:data:`~consolidator.spark.transforms.DECODED_SCHEMA`), clustered by group key: whole
    groups at a time go to :func:`columnar.simulate_chunk` (plain policies),
    :func:`columnar_shape.simulate_chunk_shaped` (plain policies with a generic event shape) or
    :func:`simulate` (the rest, and the groups the columnar paths hand back). ``deferred``: the
    field names and event size limit of records left undecoded before the shuffle
    (:mod:`consolidator.spark.deferred`), decoded here first. ``names``: the records' field names,
    whose shape and event times the messages take; with an event time field each event arrives at its record timestamp and its row takes its event time
    (``event_time_ms``), so an event older than the TTL when it arrives expires (a late arrival)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from consolidator.spark.columnar import is_plain, make_chunk, simulate_chunk
    from consolidator.spark.columnar_shape import is_plain_shaped, simulate_chunk_shaped
    from consolidator.spark.deferred import decode_deferred
    from consolidator.spark.transforms import POISON_GROUP

    out_schema = pa.schema([
        ("kind", pa.string()), ("policy", pa.string()), ("group_key", pa.string()), ("batch_id", pa.string()),
        ("reason", pa.string()), ("flushed_at_ms", pa.int64()), ("members", pa.int32()),
        ("event_count", pa.int64()), ("latencies_ms", pa.list_(pa.int64())), ("body", pa.string()),
        ("records_in", pa.int64()), ("replayed", pa.int64()),
    ])

    def table(rows: list[tuple]) -> pa.RecordBatch:
        columns = list(zip(*rows, strict=True)) if rows else [[] for _ in out_schema]
        return pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in zip(columns, out_schema, strict=True)],
                                          schema=out_schema)

    def columns(kind: str, policy: str | None, given: pa.RecordBatch) -> pa.RecordBatch:
        """``given``'s columns (names of :data:`OUTPUT_SCHEMA`), the others null."""
        count = given.num_rows
        constant = {"kind": pa.repeat(kind, count), "policy": pa.repeat(policy, count).cast(pa.string())}
        return pa.RecordBatch.from_arrays(
            [constant[f.name] if f.name in constant else given.column(f.name) if f.name in given.schema.names
             else pa.nulls(count, f.type) for f in out_schema], schema=out_schema)

    def dead_letters(data: pa.Table, rows: list[tuple]) -> None:
        poison = data.filter(pc.is_valid(data["poison_reason"])).to_pydict()
        for topic, partition, offset, ts, key, value, reason, detail in zip(
            poison["topic"], poison["partition"], poison["offset"], poison["timestamp_ms"], poison["key"],
            poison["value"], poison["poison_reason"], poison["poison_detail"], strict=True,
        ):
            record = KafkaRecord(topic, partition, offset, ts, key, value)
            entry = poison_entry(record, PoisonEvent(PoisonReason(reason), detail), ts)
            rows.append((DEAD_LETTER, None, None, None, reason, None, None, None, None, encode(entry).decode(), 1, 0))

    def reference(name: str, group_key: str, events: list[BufferedEvent], policy: Policy, rows: list[tuple]) -> None:
        result = simulate(group_key, events, policy, names)
        for b in result.batches:
            rows.append((BATCH, name, group_key, b.batch_id, str(b.reason), b.flushed_at_ms, len(b.members),
                         b.message["event_count"], b.latencies_ms, encode(b.message).decode(), None, None))
        for entry, late in zip(result.expired, result.late, strict=True):
            rows.append((EXPIRED, name, group_key, None, LATE_ARRIVAL if late else "expired", None, None,
                         entry["merged_events"], None, encode(entry).decode(), None, None))

    def whole_groups(data: pa.Table):
        """Output batches of ``data``'s groups: the columnar path's batches (plain policies), the
        rows built one at a time (dead letters, the other groups and policies), one summary per group."""
        rows: list[tuple] = []
        parsed = None
        if deferred is not None:
            data, parsed = decode_deferred(data, *deferred)
        valid = pc.not_equal(data["group_key"], POISON_GROUP)
        if not pc.all(valid).as_py():
            dead_letters(data.filter(pc.invert(valid)), rows)
            if parsed is not None:
                parsed = [k for k, v in zip(parsed, valid.to_pylist(), strict=True) if v]
            data = data.filter(valid)
        if data.num_rows == 0:
            yield table(rows)  # dead letters only
            return
        chunk = make_chunk(data["group_key"], data["timestamp_ms"], data["topic"], data["partition"],
                           data["offset"], data["item_id"], data["items"], parsed,
                           data["event_time_ms"] if names.event_times else None)
        starts = np.flatnonzero(np.diff(chunk.group, prepend=-1))
        bounds = np.append(starts, len(chunk.group)).tolist()
        events_of = {}

        def events(g: int) -> list[BufferedEvent]:
            if g not in events_of:
                events_of[g] = [chunk.event(i) for i in range(bounds[g], bounds[g + 1])]
            return events_of[g]

        for named in policies:
            handed_back = set(range(len(chunk.group_keys)))
            if is_plain(named.policy, names):
                batches, handed_back = simulate_chunk(chunk, named.policy)
                yield columns(BATCH, named.name, batches)
            elif is_plain_shaped(named.policy, names):
                batches, handed_back = simulate_chunk_shaped(chunk, named.policy, names)
                yield columns(BATCH, named.name, batches)
            for g in sorted(handed_back):
                reference(named.name, chunk.group_keys[g], events(g), named.policy, rows)
        yield table(rows)
        replayed = np.bincount(chunk.group[~chunk.first], minlength=len(chunk.group_keys))
        yield columns(SUMMARY, None, pa.record_batch({
            "group_key": pa.array(chunk.group_keys, pa.string()), "records_in": pa.array(np.diff(bounds)),
            "replayed": pa.array(replayed, pa.int64())}))

    def run(batches):
        # a chunk's parsed events (a generic shape) are trees freed by reference counting: each
        # collection would traverse them all again (a third of this function's time)
        with collector_paused():
            carry = None
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                data = pa.Table.from_batches([batch]) if carry is None else pa.concat_tables(
                    [carry, pa.Table.from_batches([batch])])
                last = pc.index(data["group_key"], data["group_key"][-1]).as_py()  # the last group may go on
                if last > 0:
                    yield from whole_groups(data.slice(0, last))
                carry = data.slice(last)
            if carry is not None:
                yield from whole_groups(carry)

    return run


def replay(records_df, policies: Sequence[NamedPolicy], names: FieldNames = DEFAULT_NAMES,
           max_event_bytes: int = 262_144, values=None, defer: bool = True):
    """Records (:data:`~consolidator.spark.transforms.RECORD_SCHEMA`) -> one frame of batches,
    dead letters and per-group summaries (:data:`OUTPUT_SCHEMA`) for every policy at once.

    Records are decoded by :func:`consolidator.spark.transforms.decode` (Spark's string functions
    where they provably agree with ``events.decode``, ``events.decode`` for the rest), shuffled
    once by group key, and each group simulated under each policy. ``values``: the records'
    :class:`~consolidator.sources.formats.ValueFormat` (None: JSON), decoded in Python.

    Under a generic event shape, a value whose group key the JVM proves
    (:func:`~consolidator.spark.transforms.claimed_group_key`) crosses the shuffle undecoded and
    is decoded once, in the per-group function (:mod:`consolidator.spark.deferred`), with the
    same results; ``defer=False`` decodes every value before the shuffle (the reference)."""
    from pyspark.sql import functions as F

    from consolidator.spark.transforms import decode, deferrable

    if not policies:
        raise ValueError("replay needs at least one policy")
    names_seen = [p.name for p in policies]
    if len(set(names_seen)) != len(names_seen):
        raise ValueError(f"policy names must be unique: {names_seen}")
    defer = defer and deferrable(names, values)
    frame = decode(records_df, names, max_event_bytes, values=values, defer=defer)
    # the key where a dead-letter entry may need it: poison, and values decoded after the shuffle
    undecoded = F.col("items").isNull()
    needed = frame.select("group_key", "timestamp_ms", "event_time_ms", "topic", "partition", "offset", "item_id",
                          "items",
                          F.when(undecoded, F.col("key")).alias("key"), "value", "poison_reason", "poison_detail")
    # sorted by group key only: a group's records must be contiguous (a group cut by an Arrow
    # batch goes on in the next), and each chunk is sorted again in simulation order in Python
    # (columnar.make_chunk). Sorting on all five keys cost about 0.7 s more per million records.
    return (needed.repartition("group_key").sortWithinPartitions("group_key")
            .mapInArrow(_partition_function(policies, names, (names, max_event_bytes) if defer else None), OUTPUT_SCHEMA))


def write_outputs(result, out_dir: str) -> None:
    """Batches as JSON lines, one sorted file per policy under ``batches/policy=<name>/``;
    dead letters under ``dead_letter/``, expired rows under ``expired/policy=<name>/``. File contents
    are deterministic; part-file names are not."""
    from pyspark.sql import functions as F

    (result.where(F.col("kind") == BATCH)
     .select("policy", "flushed_at_ms", "group_key", "batch_id", "body")
     .repartition(1).sortWithinPartitions("policy", "flushed_at_ms", "group_key", "batch_id")
     .select("policy", F.col("body").alias("value"))
     .write.mode("overwrite").partitionBy("policy").text(f"{out_dir}/batches"))
    (result.where(F.col("kind") == DEAD_LETTER).select("body")
     .repartition(1).sortWithinPartitions("body")
     .write.mode("overwrite").text(f"{out_dir}/dead_letter"))
    (result.where(F.col("kind") == EXPIRED).select("policy", "body")
     .repartition(1).sortWithinPartitions("policy", "body")
     .select("policy", F.col("body").alias("value"))
     .write.mode("overwrite").partitionBy("policy").text(f"{out_dir}/expired"))
