"""Streaming aggregator: Kafka -> ``transformWithStateInPandas`` keyed by shard of group -> batch sink.

Same policy (``policy.py``), same message v1 (``batch.py``), same validation
(``events.decode``) as the Lambda path; Spark state (RocksDB) instead of the MySQL buffer.

State is keyed by a fixed number of shards of the group keys (:mod:`consolidator.spark.shards`:
one Python call and a few state round trips per shard and micro-batch, not per group), and a
shard's records travel to it packed, one row per shard and input Arrow batch
(:func:`~consolidator.spark.packing.pack`). Per shard the processor keeps its groups' PENDING
rows in one ``ValueState``, with the buffer's rules: as one Arrow table under a plain policy
(:class:`~consolidator.spark.pending.PendingTable`), else per group with its rate state
(:class:`~consolidator.spark.shards.Shard`); and one processing-time timer at the earliest
``next_due_ms`` of its groups. Each micro-batch
ingests its events with ``now`` = the batch's processing time (the Lambda path's ingest clock),
then claims whatever is due (``full`` right away); a timer claims what became due through
``idle`` or ``hard_window``. Flushes happen on timers, not on the Lambda path's tick grid: same
decisions per group, finer timing.
What one call does with a shard is :class:`~consolidator.spark.step.ShardStep`, plain code
without Spark; the processor here only moves its state row and timers in and out of Spark.

Guarantees:
- at least once: a micro-batch re-run after a failure (restart from the checkpoint) restores the
  state of the previous batch and re-reads the same offsets, so it claims the same rows and
  republishes the same batch ids (ids depend only on group key and member positions);
- nothing lost: a micro-batch commits only after the sink and the dead-letter destination
  confirmed every write, each partition publishing from its own executor
  (:class:`~consolidator.spark.delivery.BatchWriter` raises otherwise and the query stops);
- S1 needs no position ledger here: Kafka positions are unique and Spark's checkpoint feeds
  each offset range to the state exactly once; duplicates inside one micro-batch are ignored.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field

from consolidator.rules.events import DEFAULT_NAMES, FieldNames
from consolidator.rules.policy import Policy
from consolidator.spark.delivery import BatchWriter
from consolidator.spark.packing import PACKED_SCHEMA, pack, unpack
from consolidator.spark.shards import DEFAULT_SHARDS, POISON_SHARD
from consolidator.spark.step import ShardStep, StepResult, dead_letters, job_step

OUTPUT_SCHEMA = "kind string, group_key string, batch_id string, reason string, body string"
#: One state row per shard: its pending rows, as columns under a plain policy (``rows``,
#: :meth:`~consolidator.spark.pending.PendingTable.dump`) or per group otherwise (``groups``,
#: :meth:`~consolidator.spark.shards.Shard.dump`), the timer registered for it and the number of
#: shards it was written with.
SHARD_STATE_SCHEMA = "groups string, timer_ms long, shards int, rows binary"
DEFAULT_POLICY = Policy()


def _processor_class():
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    columns = ["kind", "group_key", "batch_id", "reason", "body"]

    class ShardProcessor(StatefulProcessor):
        """Thin adapter: Spark state and timers <-> :class:`~consolidator.spark.step.ShardStep`
        (which loads the shard, ingests, lets the policy decide and builds the batches).

        A shard's groups are one value in state, read once and written once per call, and its
        timer moves only when the shard became due sooner: every state access is a round trip
        between the Python worker and the JVM, so their number, not their size, is what costs
        (see docs/guide/spark.md, "Throughput")."""

        def __init__(self, step: ShardStep) -> None:
            self.step = step

        def init(self, handle) -> None:
            self.handle = handle
            self.state = handle.getValueState("shard", SHARD_STATE_SCHEMA)

        def _apply(self, result: StepResult) -> Iterator[pd.DataFrame]:
            if result.delete_timer is not None:
                self.handle.deleteTimer(result.delete_timer)
            if result.register_timer is not None:
                self.handle.registerTimer(result.register_timer)
            if result.state is None:
                self.state.clear()
            else:
                self.state.update(result.state)
            if result.rows:
                yield pd.DataFrame(result.rows, columns=columns)

        # -- Spark callbacks -------------------------------------------------------------

        def handleInputRows(self, key, rows: Iterator[pd.DataFrame], timerValues) -> Iterator[pd.DataFrame]:
            now = timerValues.getCurrentProcessingTimeInMs()
            records = unpack(blob for frame in rows for blob in frame["records"])
            if key[0] == POISON_SHARD:
                yield pd.DataFrame(dead_letters(records, now), columns=columns)
                return
            # state.get(): None when no group of the shard holds rows or rate state
            yield from self._apply(self.step.input_rows(self.state.get(), records, now))

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
            now = timerValues.getCurrentProcessingTimeInMs()
            yield from self._apply(self.step.timer(self.state.get(), now))

        def close(self) -> None:
            pass

    return ShardProcessor


def aggregate(records_df, policy: Policy, names: FieldNames = DEFAULT_NAMES, max_event_bytes: int = 262_144,
              ack_key: bytes | None = None, shards: int = DEFAULT_SHARDS, values=None):
    """Records (:data:`~consolidator.spark.transforms.RECORD_SCHEMA`, streaming) -> batches and
    dead letters (:data:`OUTPUT_SCHEMA`); ``ack_key``: batch messages for completion tracking
    (the trackers' database's ack key: each message carries its batch's ack token).
    State is keyed by shard of the group key (``shards`` of them, fixed for a checkpoint, see
    :mod:`consolidator.spark.shards`); poison records go to their own key, without state.
    ``values``: the records' :class:`~consolidator.sources.formats.ValueFormat` (None: JSON)."""
    step = job_step(policy, names, shards, ack_key)  # the messages' shape is the decoder's
    return by_shard(records_df, names, max_event_bytes, shards, values).transformWithStateInPandas(
        statefulProcessor=_processor_class()(step), outputStructType=OUTPUT_SCHEMA,
        outputMode="Append", timeMode="ProcessingTime")


def by_shard(records_df, names: FieldNames, max_event_bytes: int, shards: int, values=None):
    """The stateful step's input: :func:`packed_records` grouped by shard."""
    return packed_records(records_df, names, max_event_bytes, shards, values).groupBy("shard")


def packed_records(records_df, names: FieldNames, max_event_bytes: int, shards: int, values=None):
    """Each record decoded (Spark's string functions where they prove the value valid, else
    ``events.decode`` in :func:`pack`; values in a registry format (``values``) all in
    :func:`pack`), then packed per shard of its group key, poison records in
    :data:`POISON_SHARD` (:data:`PACKED_SCHEMA`)."""
    from pyspark.sql import functions as F

    from consolidator.spark.transforms import RECORD_SCHEMA, fast_decode, fast_schema, not_proven

    if shards < 1:
        raise ValueError(f"shards must be >= 1, not {shards}")
    schema = fast_schema(names)
    proven = schema is not None and values is None
    fast = fast_decode(F.col("value"), schema, max_event_bytes) if proven else not_proven()
    ok = F.col("_fast.ok")
    staged = records_df.select(*RECORD_SCHEMA.fieldNames(), fast.alias("_fast")).select(
        "topic", "partition", "offset", "timestamp_ms",
        # key and value only where pack must decode the record (a dead-letter entry needs them)
        F.when(~ok, F.col("key")).alias("key"), F.when(~ok, F.col("value")).alias("value"),
        *(F.when(ok, F.col(f"_fast.{n}")).alias(n) for n in ("group_key", "item_id", "items")),
        F.when(ok, F.pmod(F.xxhash64(F.col("_fast.group_key")), F.lit(shards)).cast("int")).alias("shard"))
    packing = functools.partial(pack, names=names, max_event_bytes=max_event_bytes, shards=shards, values=values)
    return staged.mapInArrow(packing, PACKED_SCHEMA)


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
    # completion tracking on (either set): the trackers' database, as in open_store
    tracking_database_url: str | None = field(default=None, repr=False)
    tracking_database_secret_arn: str | None = None
    state_shards: int = DEFAULT_SHARDS  # state keys (fixed for a checkpoint, see consolidator.spark.shards)
    input_path: str | None = None  # a local file source instead of Kafka: a directory of record files
    input_format: str = "json"  # of input_path: json (the replay's JSON lines) or parquet
    values: object = None  # the records' consolidator.sources.formats.ValueFormat; None: JSON

    @property
    def tracked(self) -> bool:
        return self.tracking_database_url is not None or self.tracking_database_secret_arn is not None


def start(spark, config: StreamConfig, writer=None):
    """Start the query; returns the :class:`~pyspark.sql.streaming.StreamingQuery`. Reads Kafka,
    or with ``config.input_path`` the record files that appear in that directory."""
    from consolidator.spark.source import kafka_reader
    from consolidator.spark.transforms import read_record_stream, records

    if config.input_path is not None:
        frame = read_record_stream(spark, config.input_path, config.input_format)
    else:
        options = {"startingOffsets": config.starting_offsets, **dict(config.kafka_options)}
        if config.max_offsets_per_trigger:
            options["maxOffsetsPerTrigger"] = str(config.max_offsets_per_trigger)
        frame = records(kafka_reader(spark, config.bootstrap_servers, config.topic, streaming=True,
                                     prefer=config.source, options=options).load())
    ack_key = None
    if config.tracked:
        from consolidator.store import open_store

        store = open_store(config.tracking_database_url, config.tracking_database_secret_arn, tls_required=True)
        try:
            ack_key = store.ack_key()  # read on the driver, once; travels to the executors with the plan
        finally:
            store.close()
    output = aggregate(frame, config.policy, config.names, config.max_event_bytes,
                       ack_key=ack_key, shards=config.state_shards, values=config.values)
    return (output.writeStream.queryName("consolidator-aggregator")
            .foreachBatch(writer or BatchWriter(
                config.sink_url, config.dead_letter_url, tracking_database_url=config.tracking_database_url,
                tracking_database_secret_arn=config.tracking_database_secret_arn))
            .option("checkpointLocation", config.checkpoint)
            .trigger(processingTime=f"{config.trigger_ms} milliseconds")
            .start())
