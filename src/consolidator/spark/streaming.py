"""Streaming aggregator: Kafka -> ``transformWithStateInPandas`` keyed by group -> batch sink.

Same policy (``policy.py``), same message v1 (``batch.py``), same validation
(``events.decode``) as the Lambda path; Spark state (RocksDB) instead of the MySQL buffer.

Per group key the processor keeps the PENDING rows (one ``ValueState``: the rows keyed by
(bucket, item id) with the buffer's rules, :class:`~consolidator.spark.buffer.PendingBuffer`),
and one processing-time timer at the group's ``next_due_ms``. Each micro-batch ingests its events with
``now`` = the batch's processing time (the Lambda path's ingest clock), then claims whatever is
due (``full`` right away); a timer claims what became due through ``idle`` or ``hard_window``.
Flushes happen on timers, not on the Lambda path's tick grid: same decisions, finer timing.

Guarantees:
- at least once: a micro-batch re-run after a failure (restart from the checkpoint) restores the
  state of the previous batch and re-reads the same offsets, so it claims the same rows and
  republishes the same batch ids (ids depend only on group key and member positions);
- nothing lost: a micro-batch commits only after the sink and the dead-letter destination
  confirmed every write, each partition publishing from its own executor
  (:class:`BatchWriter` raises otherwise and the query stops);
- S1 needs no position ledger here: Kafka positions are unique and Spark's checkpoint feeds
  each offset range to the state exactly once; duplicates inside one micro-batch are ignored.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from consolidator.batch import Member, build_message, encode
from consolidator.deadletter import expired_entry, poison_entry
from consolidator.errors import DeliveryError
from consolidator.events import FieldNames, KafkaRecord, PoisonEvent, PoisonReason, SourcePosition
from consolidator.policy import Policy, RateState
from consolidator.spark.buffer import BufferedEvent, PendingBuffer

OUTPUT_SCHEMA = "kind string, group_key string, batch_id string, reason string, body string"
#: One state row per group: its PENDING rows (:func:`dump_rows`), the timer registered for it and
#: its rate state (:class:`~consolidator.policy.RateState`: recent claim times, first refusal).
BUFFER_STATE_SCHEMA = ("rows string, timer_ms long, rate_recent string, throttled_since_ms long,"
                       " throttled_until_ms long")
BATCH, DEAD_LETTER, EXPIRED = "batch", "dead_letter", "expired"
DEFAULT_NAMES = FieldNames()
DEFAULT_POLICY = Policy()


def dump_rows(rows: dict) -> str:
    """PENDING rows of a :class:`PendingBuffer` as one compact JSON text (the group's state)."""
    return json.dumps([
        [bucket, item_id, m.position.topic, m.position.partition, m.position.offset, m.items,
         m.first_seen_ms, m.last_update_ms, m.merged_events, m.record_ts_ms]
        for (bucket, item_id), m in rows.items()], separators=(",", ":"), ensure_ascii=False)


def load_rows(text: str) -> list[tuple[tuple[int, str], Member]]:
    """Inverse of :func:`dump_rows`."""
    return [((bucket, item_id), Member(SourcePosition(topic, partition, offset), item_id,
                                        tuple((sku, quantity) for sku, quantity in items), first, last, merged,
                                        record_ts))
            for bucket, item_id, topic, partition, offset, items, first, last, merged, record_ts in json.loads(text)]


def _processor_class():
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    from consolidator.spark.transforms import POISON_GROUP, parse_items

    columns = ["kind", "group_key", "batch_id", "reason", "body"]

    class BufferProcessor(StatefulProcessor):
        """Thin adapter: Spark state <-> :class:`PendingBuffer`, policy decides, batch builds.

        A group's whole buffer is one value in state, read once and written once per call, and
        its timer moves only when the group became due sooner: every state access is a round
        trip between the Python worker and the JVM, so their number, not their size, is what
        costs (see docs/spark.md, "Throughput")."""

        def __init__(self, policy: Policy, tracked: bool = False) -> None:
            self.policy = policy
            self.tracked = tracked  # completion tracking: messages list each member's item id

        def init(self, handle) -> None:
            self.handle = handle
            self.state = handle.getValueState("buffer", BUFFER_STATE_SCHEMA)

        # -- state <-> buffer ------------------------------------------------------------

        def _load(self, group_key: str) -> tuple[PendingBuffer, int | None]:
            stored = self.state.get()  # None when the group has no PENDING rows and no rate state
            if stored is None:
                return PendingBuffer(group_key, seen=None), None
            rows, timer_ms, recent, since, until = stored
            rate = RateState(tuple(int(t) for t in (recent or "").split(",") if t), _int_or_none(since))
            return (PendingBuffer.restore(group_key, load_rows(rows), rate, _int_or_none(until)),
                    _int_or_none(timer_ms))

        def _save(self, buffer: PendingBuffer, timer_ms: int | None) -> None:
            """Store the rows; make sure a timer fires at or before the group's due time. A
            timer set earlier stays (it fires, finds nothing due, and sets the next one): the
            idle due time moves with every event, and moving the timer each time would cost
            two more round trips per group and micro-batch."""
            due = buffer.next_due_ms(self.policy)
            if due is not None and (timer_ms is None or due < timer_ms):
                if timer_ms is not None:
                    self.handle.deleteTimer(timer_ms)
                self.handle.registerTimer(due)
                timer_ms = due
            rate = buffer.rate
            if buffer.rows or rate.recent_ms or rate.throttled_since_ms is not None:
                self.state.update((dump_rows(buffer.rows), timer_ms, ",".join(map(str, rate.recent_ms)),
                                   rate.throttled_since_ms, buffer.throttled_until_ms))
            else:
                if timer_ms is not None:
                    self.handle.deleteTimer(timer_ms)
                self.state.clear()

        def _flush(self, buffer: PendingBuffer, now_ms: int) -> list[tuple]:
            out = []
            plan = buffer.plan(now_ms, self.policy)
            for member in plan.expired:  # to the dead-letter destination, like the Lambda path's expiry
                entry = expired_entry(buffer.group_key, member, now_ms, now_ms)
                out.append((EXPIRED, buffer.group_key, None, "expired", json.dumps(entry, sort_keys=True)))
            for claim in plan.claims:
                message = build_message(buffer.group_key, claim.rows, claim.reason, flushed_at_ms=now_ms,
                                        tracked=self.tracked, held_back_ms=claim.held_back_ms)
                out.append((BATCH, buffer.group_key, message["batch_id"], str(claim.reason),
                            encode(message).decode()))
            return out

        # -- Spark callbacks -------------------------------------------------------------

        def handleInputRows(self, key, rows: Iterator[pd.DataFrame], timerValues) -> Iterator[pd.DataFrame]:
            group_key = key[0]
            now = timerValues.getCurrentProcessingTimeInMs()
            frame = pd.concat(list(rows), ignore_index=True)
            if group_key == POISON_GROUP:
                yield pd.DataFrame(_dead_letters(frame, now), columns=columns)
                return
            buffer, timer_ms = self._load(group_key)
            buffer.seen = set()  # duplicates inside this micro-batch only (see module docstring)
            events = sorted(
                (BufferedEvent(SourcePosition(t, int(p), int(o)), int(ts), item, parse_items(items))
                 for t, p, o, ts, item, items in zip(
                     frame["topic"], frame["partition"], frame["offset"], frame["timestamp_ms"],
                     frame["item_id"], frame["items"], strict=True)),
                key=lambda e: (e.timestamp_ms, e.position))
            for event in events:
                buffer.ingest(event, now)
            out = self._flush(buffer, now)
            self._save(buffer, timer_ms)
            if out:
                yield pd.DataFrame(out, columns=columns)

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
            now = timerValues.getCurrentProcessingTimeInMs()
            buffer, _ = self._load(key[0])  # the expired timer is gone: nothing to delete
            out = self._flush(buffer, now)
            self._save(buffer, None)
            if out:
                yield pd.DataFrame(out, columns=columns)

        def close(self) -> None:
            pass

    return BufferProcessor


def _int_or_none(value) -> int | None:
    """A nullable long from Spark state (None, or NaN through pandas) as an int or None."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else int(value)


def _dead_letters(frame, now_ms: int) -> list[tuple]:
    out = []
    for topic, partition, offset, ts, key, value, reason, detail in zip(
        frame["topic"], frame["partition"], frame["offset"], frame["timestamp_ms"], frame["key"],
        frame["value"], frame["poison_reason"], frame["poison_detail"], strict=True,
    ):
        record = KafkaRecord(topic, int(partition), int(offset), int(ts), key, value)
        entry = poison_entry(record, PoisonEvent(PoisonReason(reason), detail), now_ms)
        out.append((DEAD_LETTER, None, None, reason, json.dumps(entry, sort_keys=True)))
    return out


def aggregate(records_df, policy: Policy, names: FieldNames = DEFAULT_NAMES, max_event_bytes: int = 262_144,
              tracked: bool = False):
    """Records (:data:`~consolidator.spark.transforms.RECORD_SCHEMA`, streaming) -> batches and
    dead letters (:data:`OUTPUT_SCHEMA`); ``tracked``: batch messages for completion tracking."""
    from consolidator.spark.transforms import decode

    return decode(records_df, names, max_event_bytes).groupBy("group_key").transformWithStateInPandas(
        statefulProcessor=_processor_class()(policy, tracked), outputStructType=OUTPUT_SCHEMA,
        outputMode="Append", timeMode="ProcessingTime")


_DESTINATIONS: dict[tuple[str, str], object] = {}  # per Python worker: producers outlive a task


def _open(kind: str, url: str, opener: Callable):
    """One sink / dead-letter client per URL and worker process (Kafka producers are costly)."""
    client = _DESTINATIONS.get((kind, url))
    if client is None:
        client = _DESTINATIONS[(kind, url)] = opener(url)
    return client


def deliver_partition(rows: Iterable, *, sink_url: str, dead_letter_url: str, epoch_id: int,
                      sink_opener: Callable | None = None, chunk: int = 500,
                      tracking_database_url: str | None = None) -> None:
    """Publish one partition of a micro-batch's output from the executor holding it: batches to
    the sink, dead letters to the dead-letter destination, ``chunk`` at a time. Raises
    :class:`DeliveryError` unless every write is confirmed, which fails the task (Spark retries
    it, then fails the micro-batch; the same rows, with the same batch ids, go out again).
    With ``tracking_database_url`` every batch is sealed there (completion tracking, the Lambda
    path's trackers) before it is published, so an ack never finds its batch unknown."""
    from consolidator.deadletter import dead_letter_from_url
    from consolidator.sinks import OutgoingBatch, sink_from_url

    batches: list = []
    dead: list[dict] = []

    def send_batches() -> None:
        if tracking_database_url:
            _seal(tracking_database_url, batches, epoch_id)
        failures = _open("sink", sink_url, sink_opener or sink_from_url).publish(batches)
        if failures:
            raise DeliveryError(f"micro-batch {epoch_id}: {len(failures)} of {len(batches)} batches not "
                                f"confirmed: {list(failures.values())[:3]}")
        batches.clear()

    def send_dead() -> None:
        failed = _open("dead_letter", dead_letter_url, dead_letter_from_url).send(dead)
        if failed:
            raise DeliveryError(f"micro-batch {epoch_id}: {len(failed)} of {len(dead)} dead-letter entries "
                                "not confirmed")
        dead.clear()

    for row in rows:
        if row["kind"] == BATCH:
            batches.append(OutgoingBatch(row["batch_id"], row["group_key"], row["body"].encode()))
            if len(batches) >= chunk:
                send_batches()
        else:
            dead.append(json.loads(row["body"]))
            if len(dead) >= chunk:
                send_dead()
    if dead:
        send_dead()
    if batches:
        send_batches()


def _seal(database_url: str, batches: list, epoch_id: int) -> None:
    from consolidator.clock import SystemClock
    from consolidator.errors import StoreError, StoreUnavailable
    from consolidator.store import open_store
    from consolidator.store.completion import SealedBatch

    store = _open("trackers", database_url, open_store)
    try:
        store.seal([SealedBatch.of_message(json.loads(b.body)) for b in batches], SystemClock().now_ms())
    except (StoreError, StoreUnavailable) as error:
        raise DeliveryError(f"micro-batch {epoch_id}: batches not sealed for completion tracking: {error}") from error


@dataclass
class BatchWriter:
    """``foreachBatch`` sink: batches to ``sink_url`` (any :func:`consolidator.sinks.sink_from_url`
    URL), dead letters to ``dead_letter_url`` (:func:`consolidator.deadletter.dead_letter_from_url`),
    each partition from its executor (:func:`deliver_partition`): nothing goes through the driver.
    Returns only when every partition confirmed every write; otherwise the micro-batch fails, is
    not committed and runs again on restart (at least once; consumers dedupe on ``batch_id``).
    ``sink_opener`` (URL -> sink) must be picklable; None = :func:`consolidator.sinks.sink_from_url`."""

    sink_url: str
    dead_letter_url: str
    sink_opener: Callable | None = None
    tracking_database_url: str | None = None  # completion tracking: seal each batch there first

    def __call__(self, df, epoch_id: int) -> None:
        df.foreachPartition(functools.partial(
            deliver_partition, sink_url=self.sink_url, dead_letter_url=self.dead_letter_url,
            epoch_id=epoch_id, sink_opener=self.sink_opener, tracking_database_url=self.tracking_database_url))

    def close(self) -> None:
        """Release the destinations this process opened (the driver's, in local runs)."""
        close_destinations()


def close_destinations() -> None:
    while _DESTINATIONS:
        _, client = _DESTINATIONS.popitem()
        close = getattr(client, "close", None)
        if close is not None:
            close()


@dataclass(frozen=True)
class StreamConfig:
    bootstrap_servers: str
    topic: str
    sink_url: str
    dead_letter_url: str
    checkpoint: str
    policy: Policy = DEFAULT_POLICY
    names: FieldNames = DEFAULT_NAMES
    max_event_bytes: int = 262_144
    trigger_ms: int = 5_000
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    source: str = "auto"  # auto | spark | python (see consolidator.spark.source.kafka_format)
    kafka_options: tuple[tuple[str, str], ...] = ()
    tracking_database_url: str | None = None  # completion tracking on: the trackers' database


def start(spark, config: StreamConfig, writer=None):
    """Start the query; returns the :class:`~pyspark.sql.streaming.StreamingQuery`."""
    from consolidator.spark.source import kafka_reader
    from consolidator.spark.transforms import records

    options = {"startingOffsets": config.starting_offsets, **dict(config.kafka_options)}
    if config.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(config.max_offsets_per_trigger)
    source = kafka_reader(spark, config.bootstrap_servers, config.topic, streaming=True,
                          prefer=config.source, options=options).load()
    output = aggregate(records(source), config.policy, config.names, config.max_event_bytes,
                       tracked=config.tracking_database_url is not None)
    return (output.writeStream.queryName("consolidator-aggregator")
            .foreachBatch(writer or BatchWriter(config.sink_url, config.dead_letter_url,
                                                tracking_database_url=config.tracking_database_url))
            .option("checkpointLocation", config.checkpoint)
            .trigger(processingTime=f"{config.trigger_ms} milliseconds")
            .start())
