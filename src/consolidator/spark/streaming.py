"""Streaming aggregator: Kafka -> ``transformWithStateInPandas`` keyed by group -> batch sink.

Same policy (``policy.py``), same message v1 (``batch.py``), same validation
(``events.decode``) as the Lambda path; Spark state (RocksDB) instead of the MySQL buffer.

Per group key the processor keeps the PENDING rows in a ``MapState`` keyed by (bucket, item id)
with the buffer's rules (:class:`~consolidator.spark.buffer.PendingBuffer`), and one
processing-time timer at the group's ``next_due_ms``. Each micro-batch ingests its events with
``now`` = the batch's processing time (the Lambda path's ingest clock), then claims whatever is
due (``full`` right away); a timer claims what became due through ``idle`` or ``hard_window``.
Flushes happen on timers, not on the Lambda path's tick grid: same decisions, finer timing.
Rate limit and TTL are :func:`consolidator.policy.plan_group`'s, with the group's rate state in a
``ValueState``; expired rows go to the dead-letter destination in the same micro-batch.

Guarantees:
- at least once: a micro-batch re-run after a failure (restart from the checkpoint) restores the
  state of the previous batch and re-reads the same offsets, so it claims the same rows and
  republishes the same batch ids (ids depend only on group key and member positions);
- nothing lost: a micro-batch commits only after the sink and the dead-letter destination
  confirmed every write (:func:`batch_writer` raises otherwise and the query stops);
- S1 needs no position ledger here: Kafka positions are unique and Spark's checkpoint feeds
  each offset range to the state exactly once; duplicates inside one micro-batch are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field

from consolidator.batch import Member, build_message, encode
from consolidator.deadletter import expired_entry, poison_entry
from consolidator.errors import DeliveryError
from consolidator.events import FieldNames, KafkaRecord, PoisonEvent, PoisonReason, SourcePosition
from consolidator.policy import Policy, RateState
from consolidator.spark.buffer import BufferedEvent, PendingBuffer

OUTPUT_SCHEMA = "kind string, group_key string, batch_id string, reason string, body string"
ROW_KEY_SCHEMA = "bucket int, item_id string"
ROW_VALUE_SCHEMA = ("topic string, partition int, offset long, items string, first_seen_ms long,"
                    " last_update_ms long, merged_events int, record_ts_ms long")
RATE_SCHEMA = "recent string, throttled_since_ms long, throttled_until_ms long"  # the group's RateState
BATCH, DEAD_LETTER, EXPIRED = "batch", "dead_letter", "expired"
DEFAULT_NAMES = FieldNames()
DEFAULT_POLICY = Policy()


def _processor_class():
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    from consolidator.spark.transforms import POISON_GROUP, parse_items

    columns = ["kind", "group_key", "batch_id", "reason", "body"]

    class BufferProcessor(StatefulProcessor):
        """Thin adapter: Spark state <-> :class:`PendingBuffer`, policy decides, batch builds."""

        def __init__(self, policy: Policy) -> None:
            self.policy = policy

        def init(self, handle) -> None:
            self.handle = handle
            self.rows = handle.getMapState("rows", ROW_KEY_SCHEMA, ROW_VALUE_SCHEMA)
            self.rate = handle.getValueState("rate", RATE_SCHEMA)

        # -- state <-> buffer ------------------------------------------------------------

        def _load(self, group_key: str) -> tuple[PendingBuffer, dict]:
            stored = {}
            for (bucket, item_id), (topic, partition, offset, items, first, last, merged, record_ts) in (
                    self.rows.iterator()):
                stored[(int(bucket), item_id)] = Member(
                    SourcePosition(topic, int(partition), int(offset)), item_id, parse_items(items),
                    int(first), int(last), int(merged), None if pd.isna(record_ts) else int(record_ts))
            rate, until = RateState(), None
            if self.rate.exists():
                recent, since, until = self.rate.get()
                rate = RateState(tuple(int(t) for t in recent.split(",") if t),
                                 None if pd.isna(since) else int(since))
                until = None if pd.isna(until) else int(until)
            return PendingBuffer.restore(group_key, stored.items(), rate, until), stored

        def _save(self, buffer: PendingBuffer, stored: dict) -> None:
            for key in stored.keys() - buffer.rows.keys():
                self.rows.removeKey(key)
            for key, m in buffer.rows.items():
                if stored.get(key) != m:
                    self.rows.updateValue(key, (
                        m.position.topic, m.position.partition, m.position.offset,
                        json.dumps(m.items, separators=(",", ":"), ensure_ascii=False),
                        m.first_seen_ms, m.last_update_ms, m.merged_events, m.record_ts_ms))
            if buffer.rate.recent_ms or buffer.rate.throttled_since_ms is not None:
                self.rate.update((",".join(map(str, buffer.rate.recent_ms)), buffer.rate.throttled_since_ms,
                                  buffer.throttled_until_ms))
            elif self.rate.exists():
                self.rate.clear()
            for timer in list(self.handle.listTimers()):
                self.handle.deleteTimer(timer)
            due = buffer.next_due_ms(self.policy)
            if due is not None:
                self.handle.registerTimer(due)

        def _flush(self, buffer: PendingBuffer, now_ms: int) -> list[tuple]:
            out = []
            plan = buffer.plan(now_ms, self.policy)
            for member in plan.expired:  # to the dead-letter destination, like the Lambda path's expiry
                entry = expired_entry(buffer.group_key, member, now_ms, now_ms)
                out.append((EXPIRED, buffer.group_key, None, "expired", json.dumps(entry, sort_keys=True)))
            for claim in plan.claims:
                message = build_message(buffer.group_key, claim.rows, claim.reason, flushed_at_ms=now_ms,
                                        held_back_ms=claim.held_back_ms)
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
            buffer, stored = self._load(group_key)
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
            self._save(buffer, stored)
            if out:
                yield pd.DataFrame(out, columns=columns)

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
            now = timerValues.getCurrentProcessingTimeInMs()
            buffer, stored = self._load(key[0])
            out = self._flush(buffer, now)
            self._save(buffer, stored)
            if out:
                yield pd.DataFrame(out, columns=columns)

        def close(self) -> None:
            pass

    return BufferProcessor


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


def aggregate(records_df, policy: Policy, names: FieldNames = DEFAULT_NAMES, max_event_bytes: int = 262_144):
    """Records (:data:`~consolidator.spark.transforms.RECORD_SCHEMA`, streaming) -> batches and
    dead letters (:data:`OUTPUT_SCHEMA`)."""
    from consolidator.spark.transforms import decode

    return decode(records_df, names, max_event_bytes).groupBy("group_key").transformWithStateInPandas(
        statefulProcessor=_processor_class()(policy), outputStructType=OUTPUT_SCHEMA,
        outputMode="Append", timeMode="ProcessingTime")


@dataclass
class BatchWriter:
    """``foreachBatch`` sink: batches to ``sink_url`` (any :func:`consolidator.sinks.sink_from_url`
    URL), dead letters to ``dead_letter_url`` (:func:`consolidator.deadletter.dead_letter_from_url`).
    Raises :class:`DeliveryError` unless every write is confirmed, so the micro-batch is not
    committed and runs again on restart (at least once; consumers dedupe on ``batch_id``)."""

    sink_url: str
    dead_letter_url: str
    _sink: object = field(default=None, repr=False)
    _dead_letter: object = field(default=None, repr=False)

    def __call__(self, df, epoch_id: int) -> None:
        from consolidator.deadletter import dead_letter_from_url
        from consolidator.sinks import OutgoingBatch, sink_from_url

        rows = df.collect()  # consolidated output: at most a few batches per group and trigger
        batches = [OutgoingBatch(r["batch_id"], r["group_key"], r["body"].encode()) for r in rows
                   if r["kind"] == BATCH]
        dead = [json.loads(r["body"]) for r in rows if r["kind"] in (DEAD_LETTER, EXPIRED)]
        if dead:
            self._dead_letter = self._dead_letter or dead_letter_from_url(self.dead_letter_url)
            failed = self._dead_letter.send(dead)
            if failed:
                raise DeliveryError(f"micro-batch {epoch_id}: {len(failed)} dead-letter entries not confirmed")
        if batches:
            self._sink = self._sink or sink_from_url(self.sink_url)
            failures = self._sink.publish(batches)
            if failures:
                raise DeliveryError(f"micro-batch {epoch_id}: {len(failures)} batches not confirmed: "
                                    f"{list(failures.values())[:3]}")

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()
            self._sink = None


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


def start(spark, config: StreamConfig, writer=None):
    """Start the query; returns the :class:`~pyspark.sql.streaming.StreamingQuery`."""
    from consolidator.spark.source import kafka_reader
    from consolidator.spark.transforms import records

    options = {"startingOffsets": config.starting_offsets, **dict(config.kafka_options)}
    if config.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(config.max_offsets_per_trigger)
    source = kafka_reader(spark, config.bootstrap_servers, config.topic, streaming=True,
                          prefer=config.source, options=options).load()
    output = aggregate(records(source), config.policy, config.names, config.max_event_bytes)
    return (output.writeStream.queryName("consolidator-aggregator")
            .foreachBatch(writer or BatchWriter(config.sink_url, config.dead_letter_url))
            .option("checkpointLocation", config.checkpoint)
            .trigger(processingTime=f"{config.trigger_ms} milliseconds")
            .start())
