"""Replay: "what would this policy have produced on last week's traffic?"

The replay simulates the serverless path exactly: records sorted by (timestamp, position),
each ingested with the clock at its record timestamp into a :class:`PendingBuffer` (the MySQL
buffer's rules), flush ticks on the epoch-aligned grid of ``tick_interval`` running
:func:`consolidator.policy.plan_batches`, messages built by :func:`consolidator.batch.build_message`
with ``flushed_at`` = the tick. After the last record it keeps ticking until nothing is pending.

Guarantees: deterministic (same input and policies, same batches, ids and figures); every
valid event is in exactly one batch per policy, every poison record in the dead-letter output.
A record position is assumed to identify one record (true for Kafka): duplicates of a position
inside a group are no-ops, as in the buffer's position ledger.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from consolidator.batch import Member, build_message, encode
from consolidator.deadletter import expired_entry, poison_entry
from consolidator.errors import ConsolidatorError
from consolidator.events import FieldNames, KafkaRecord, PoisonEvent, PoisonReason, SourcePosition
from consolidator.events import decode as decode_record
from consolidator.policy import FlushReason, Policy, RateLimit, next_tick_ms
from consolidator.spark.buffer import BufferedEvent, PendingBuffer


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


@dataclass(frozen=True, slots=True)
class ReplayBatch:
    group_key: str
    reason: FlushReason
    flushed_at_ms: int
    members: tuple[Member, ...]
    message: dict = field(repr=False)
    held_back_ms: int = 0

    @property
    def batch_id(self) -> str:
        return self.message["batch_id"]

    @property
    def latencies_ms(self) -> list[int]:
        """Per member row: flushed_at - first_seen."""
        return [self.flushed_at_ms - m.first_seen_ms for m in self.members]


@dataclass(frozen=True, slots=True)
class GroupReplay:
    batches: list[ReplayBatch]
    records_in: int
    replayed: int
    expired: list[dict] = field(default_factory=list)  # dead-letter entries (reason ``expired``)


def simulate_group(group_key: str, events: Sequence[BufferedEvent], policy: Policy) -> GroupReplay:
    """All batches one group yields under ``policy`` on the serverless tick schedule.

    Jumps straight to the next tick where something can happen: the first tick at or after
    the group's ``next_due_ms``, unless the next record arrives at or before it (then that
    record is ingested first, as the serverless path ingests every record with
    timestamp <= T before the tick at T). A group held back by its rate limit is looked at
    again at the first tick where the limit allows a batch or a row goes over the TTL.
    """
    ordered = sorted(events, key=lambda e: (e.timestamp_ms, e.position))
    buffer = PendingBuffer(group_key)
    batches: list[ReplayBatch] = []
    expired: list[dict] = []
    replayed = 0
    index = 0
    while index < len(ordered) or buffer.rows:
        due = buffer.next_due_ms(policy)
        tick = None if due is None else next_tick_ms(due, policy)
        if index < len(ordered) and (tick is None or ordered[index].timestamp_ms <= tick):
            event = ordered[index]
            index += 1
            if buffer.ingest(event, event.timestamp_ms) == "replayed":
                replayed += 1
            continue
        assert tick is not None  # the loop condition guarantees pending rows here
        plan = buffer.plan(tick, policy)
        expired.extend(expired_entry(group_key, m, tick, tick) for m in plan.expired)
        for claim in plan.claims:
            message = build_message(group_key, claim.rows, claim.reason, flushed_at_ms=tick,
                                    held_back_ms=claim.held_back_ms)
            batches.append(ReplayBatch(group_key, claim.reason, tick, tuple(claim.rows), message,
                                       claim.held_back_ms))
    return GroupReplay(batches, len(ordered), replayed, expired)


DEFAULT_NAMES = FieldNames()

# -- Spark -----------------------------------------------------------------------------------

OUTPUT_SCHEMA = (
    "kind string, policy string, group_key string, batch_id string, reason string,"
    " flushed_at_ms long, members int, event_count long, latencies_ms array<long>, body string,"
    " records_in long, replayed long"
)
BATCH, DEAD_LETTER, SUMMARY, MISROUTED, EXPIRED = "batch", "dead_letter", "summary", "misrouted", "expired"


class ReplayRoutingError(ConsolidatorError):
    """Fast-path grouping disagreed with ``events.decode`` for some records (see :func:`replay`)."""


def _group_function(policies: Sequence[NamedPolicy], names: FieldNames, max_event_bytes: int, decoded: bool):
    """The per-group Arrow function (no pandas on the hot path). With ``decoded`` the input is
    :data:`~consolidator.spark.transforms.DECODED_SCHEMA`; otherwise raw records with a
    ``group_key`` read by Spark, decoded here with ``events.decode`` and checked against it."""
    import pyarrow as pa

    from consolidator.spark.transforms import POISON_GROUP, parse_items

    out_schema = pa.schema([
        ("kind", pa.string()), ("policy", pa.string()), ("group_key", pa.string()), ("batch_id", pa.string()),
        ("reason", pa.string()), ("flushed_at_ms", pa.int64()), ("members", pa.int32()),
        ("event_count", pa.int64()), ("latencies_ms", pa.list_(pa.int64())), ("body", pa.string()),
        ("records_in", pa.int64()), ("replayed", pa.int64()),
    ])

    def table(rows: list[tuple]) -> pa.Table:
        columns = list(zip(*rows, strict=True)) if rows else [[] for _ in out_schema]
        return pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(columns, out_schema, strict=True)],
                                    schema=out_schema)

    def dead_letter(record: KafkaRecord, error: PoisonEvent) -> tuple:
        entry = poison_entry(record, error, record.timestamp_ms)
        return (DEAD_LETTER, None, None, None, str(error.reason), None, None, None, None,
                encode(entry).decode(), 1, 0)

    def events_of(cols: dict, group_key: str, rows: list[tuple]) -> list:
        events = []
        if decoded:
            for topic, partition, offset, ts, key, value, item_id, items, reason, detail in zip(
                cols["topic"], cols["partition"], cols["offset"], cols["timestamp_ms"], cols["key"],
                cols["value"], cols["item_id"], cols["items"], cols["poison_reason"], cols["poison_detail"],
                strict=True,
            ):
                if reason is not None:
                    rows.append(dead_letter(KafkaRecord(topic, partition, offset, ts, key, value),
                                            PoisonEvent(PoisonReason(reason), detail)))
                else:
                    events.append(BufferedEvent(SourcePosition(topic, partition, offset), ts, item_id,
                                                parse_items(items)))
            return events
        for topic, partition, offset, ts, key, value in zip(
            cols["topic"], cols["partition"], cols["offset"], cols["timestamp_ms"], cols["key"], cols["value"],
            strict=True,
        ):
            record = KafkaRecord(topic, partition, offset, ts, key, value)
            try:
                event = decode_record(record, names, max_event_bytes)
            except PoisonEvent as error:
                rows.append(dead_letter(record, error))
                continue
            if event.group_key != group_key:
                rows.append((MISROUTED, None, event.group_key, None, None, None, None, None, None, None, 1, 0))
                continue
            events.append(event)  # an Event has what the buffer reads (position, timestamp, item)
        return events

    def run(data: pa.Table) -> pa.Table:
        cols = data.to_pydict()
        group_key = cols["group_key"][0]
        rows: list[tuple] = []
        events = events_of(cols, group_key, rows)
        if group_key == POISON_GROUP and not events:
            return table(rows)
        replayed = 0
        for named in policies:
            result = simulate_group(group_key, events, named.policy)
            replayed = result.replayed
            for b in result.batches:
                rows.append((BATCH, named.name, group_key, b.batch_id, str(b.reason), b.flushed_at_ms,
                             len(b.members), b.message["event_count"], b.latencies_ms,
                             encode(b.message).decode(), None, None))
            for entry in result.expired:
                rows.append((EXPIRED, named.name, group_key, None, "expired", None, None,
                             entry["merged_events"], None, encode(entry).decode(), None, None))
        rows.append((SUMMARY, None, group_key, None, None, None, None, None, None, None, len(events),
                     replayed))
        return table(rows)

    return run


def replay(records_df, policies: Sequence[NamedPolicy], names: FieldNames = DEFAULT_NAMES,
           max_event_bytes: int = 262_144, exact_grouping: bool = False):
    """Records (:data:`~consolidator.spark.transforms.RECORD_SCHEMA`) -> one frame of batches,
    dead letters and per-group summaries (:data:`OUTPUT_SCHEMA`) for every policy at once:
    the input is shuffled once, each group simulated under each policy.

    Fast path (default): Spark reads the group key with ``get_json_object`` for the shuffle and
    each record is decoded once, inside its group, by ``events.decode``; a record whose decoded
    key differs (duplicate JSON keys, ``-0``) comes out as ``misrouted`` and
    :func:`check_routing` refuses the result. ``exact_grouping`` decodes in a separate pass
    first and groups by the decoded key: always exact, slower."""
    from pyspark.sql import functions as F

    from consolidator.spark.transforms import POISON_GROUP, RECORD_SCHEMA, decode

    if not policies:
        raise ValueError("replay needs at least one policy")
    names_seen = [p.name for p in policies]
    if len(set(names_seen)) != len(names_seen):
        raise ValueError(f"policy names must be unique: {names_seen}")
    if exact_grouping:
        frame = decode(records_df, names, max_event_bytes)
    else:
        path = "$." + names.group_key if names.group_key.isidentifier() else f"$['{names.group_key}']"
        frame = records_df.select(
            *RECORD_SCHEMA.fieldNames(),
            F.coalesce(F.get_json_object(F.col("value").cast("string"), path), F.lit(POISON_GROUP)).alias("group_key"))
    function = _group_function(policies, names, max_event_bytes, decoded=exact_grouping)
    return frame.groupBy("group_key").applyInArrow(function, OUTPUT_SCHEMA)


def check_routing(result) -> None:
    """Raise :class:`ReplayRoutingError` if the fast path misrouted any record."""
    from pyspark.sql import functions as F

    misrouted = result.where(F.col("kind") == MISROUTED).count()
    if misrouted:
        raise ReplayRoutingError(
            f"{misrouted} records have a group key that Spark's JSON path reads differently from "
            "events.decode (duplicate keys or unusual numbers); run the replay with exact grouping")


def write_outputs(result, out_dir: str) -> None:
    """Batches as JSON lines, one sorted file per policy under ``batches/policy=<name>/``;
    dead letters under ``dead_letter/``, expired rows under ``expired/policy=<name>/``. File contents
    are deterministic; part-file names are not."""
    from pyspark.sql import functions as F

    check_routing(result)
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
