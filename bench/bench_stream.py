"""Benchmark: the streaming aggregator against Spark's streaming ``session_window`` aggregation.

    python bench/bench_stream.py [--events 1000000] [--groups 2000] [--master local[2]]

Writes ``--events`` order records over ``--groups`` groups as Parquet files of ``--file-records``
records each (a file stream with ``maxFilesPerTrigger`` = ``--files-per-trigger`` is the source,
so the source is cheap and both queries see the same micro-batches), then runs on the same
session, each with the RocksDB state store and its own checkpoint:

- baseline: ``withWatermark`` + ``groupBy(group key, session_window(ts, gap)).count()`` to the
  ``noop`` sink, until every file is read and the sessions are closed (a last record far in the
  future moves the watermark past all of them);
- aggregator: the real query (:func:`consolidator.spark.streaming.aggregate`, i.e. JSON decode +
  ``transformWithStateInPandas``) through the real writer (:class:`BatchWriter`, file sink),
  until every file is read and every event is out (the state is empty and the batches written
  hold every event; the run fails otherwise).

- generic: the aggregator on ``--generic-events`` records of the generic shape
  (``bench/generic.py``: about 1 KB events, full member payload, four outputs), after a small
  warm-up of its own: ``generic_ratio_vs_aggregator`` is its events/s over the default run's
  (a small run, the general path against the specialised one).

- ceiling: the aggregator's query with a stateful processor that drops its input (no state, no
  output): what decode, packing, shuffle and ``transformWithStateInPandas`` cost before any of
  our processing, i.e. the best ratio any Python processor could reach on this query.

Before the measured runs, each query runs once on a small input of its own (``--warmup-events``)
in the same session: the JVM's JIT and the Python workers are then warm for all three, not only
for whichever query runs second.

The aggregator's policy is in processing time, so the bench uses a short one (``--debounce-ms``,
``--hard-window-ms``) that closes batches during the run. Figures per query: sustained events/s
(input rows / summed duration of the micro-batches that read input), end-to-end events/s (first
trigger to last event out), the same rate after the first micro-batch (which also plans the
query and starts the Python workers) and that first micro-batch's duration, micro-batch
duration p50/p95, state rows and state size on disk.
The last line is one JSON object; ``ratio_vs_streaming_session_window`` = sustained events/s of
the aggregator / sustained events/s of the baseline (target >= 0.5); ``ceiling_ratio`` the same for
the ceiling query. Flink's Nexmark q11
(session windows) publishes about 40,000 events/s per core, printed next to ours.

The peer, measured in the same run: the input is also written as JSON lines (the same records;
Flink's wheel reads no Parquet), Flink's SQL session window (``flink_session.py``, Nexmark q11's
shape, streaming mode, parallelism = cores, the baseline's gap and watermark, warmed up in its own
JVM) reads them, and the aggregator runs once more on them through Spark's JSON file source.
``ratio_vs_flink_session_window`` = that aggregator run's sustained events/s / Flink's events/s
(its job's wall time, submission to the last session out, so it includes the job's start).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from flink import flink_session_window
from generic import GENERIC_NAMES

from consolidator.rules.events import FieldNames
from consolidator.rules.policy import Policy
from consolidator.spark.session import build_session
from consolidator.spark.shards import DEFAULT_SHARDS

START_MS = 1_795_000_020_000
NEXMARK_Q11_EVENTS_PER_CORE = 40_000


def generate(directory: Path, events: int, groups: int, file_records: int, span_ms: int,
             generic: bool = False) -> int:
    """Parquet files of records (topic, partition, offset, timestamp, key, value) in time order,
    written one after the other (the file source lists them by modification time). Returns the
    number of files. Group of event i: a multiplicative hash of i mod ``groups``; 50 order ids
    per group; timestamps evenly over ``span_ms``. The same records go to ``<directory>-json`` as
    JSON lines, one file per Parquet file (key and value as strings, timestamp in epoch ms).
    ``generic``: about 1 KB events of the generic shape's layout (bench/generic.py)."""
    import orjson
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True)
    json_directory = directory.with_name(directory.name + "-json")
    json_directory.mkdir()
    schema = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                        ("timestamp", pa.timestamp("ms", tz="UTC")), ("key", pa.binary()),
                        ("value", pa.binary())])
    files = 0
    for first in range(0, events, file_records):
        ids = range(first, min(first + file_records, events))
        group = [f"WH-{(i * 2_654_435_761) % 4_294_967_296 % groups}" for i in ids]
        values = [(f'{{"location_id":"{g}","order_id":"{g}-O{(i * 40_503) % 50}",'
                   f'"items":[{{"sku":"SKU-{i % 20}","quantity":{i % 7 + 1}}}]}}').encode()
                  for i, g in zip(ids, group, strict=True)]
        if generic:
            values = [(f'{{"location_id":"{g}","order_id":"{g}-O{(i * 40_503) % 50}",'
                       f'"order":{{"total":{i % 10_000 / 100},"status":"paid"}},'
                       f'"context":{{"page":"/p/{i % 20}","agent":"bench/1.0 {"x" * 800}"}}}}').encode()
                      for i, g in zip(ids, group, strict=True)]
        table = pa.table({
            "topic": ["orders"] * len(ids), "partition": [i % 8 for i in ids], "offset": [i // 8 for i in ids],
            "timestamp": [START_MS + i * span_ms // events for i in ids],
            "key": [g.encode() for g in group], "value": values}, schema=schema)
        pq.write_table(table, directory / f"part-{files:05d}.parquet")
        lines = (orjson.dumps({"topic": "orders", "partition": i % 8, "offset": i // 8,
                               "timestamp": START_MS + i * span_ms // events, "key": g, "value": v.decode()})
                 for i, g, v in zip(ids, group, values, strict=True))
        (json_directory / f"part-{files:05d}.json").write_bytes(b"\n".join(lines) + b"\n")
        files += 1
    return files


def _sentinel(directory: Path, files: int, span_ms: int) -> None:
    """One record a day after the input: moves the baseline's watermark past every session."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(directory / "part-00000.parquet").slice(0, 1)
    table = table.set_column(3, "timestamp", pa.array([START_MS + span_ms + 86_400_000],
                                                      pa.timestamp("ms", tz="UTC")))
    pq.write_table(table, directory / f"part-{files:05d}.parquet")


def _stream(spark, directory: Path, files_per_trigger: int):
    from pyspark.sql import functions as F

    from consolidator.spark.transforms import SOURCE_SCHEMA

    reader = spark.readStream.option("maxFilesPerTrigger", files_per_trigger)
    if not directory.name.endswith("-json"):
        return reader.schema(SOURCE_SCHEMA).parquet(str(directory))
    frame = reader.schema("topic STRING, partition INT, offset BIGINT, timestamp BIGINT, key STRING, value STRING"
                          ).json(str(directory))
    return frame.select("topic", "partition", "offset", "timestamp", F.col("key").cast("binary").alias("key"),
                        F.col("value").cast("binary").alias("value"))


def _wait(query, done, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if query.exception() is not None:
            raise query.exception()
        if time.monotonic() > deadline:
            query.stop()
            raise TimeoutError(f"{query.name} not done within {timeout_s} s; last progress {query.lastProgress}")
        time.sleep(0.2)


def _figures(progress: list[dict], events: int, end_to_end_s: float, checkpoint: Path) -> dict:
    with_input = [p for p in progress if p["numInputRows"] > 0]
    durations = sorted(p["durationMs"]["triggerExecution"] for p in with_input)
    busy_s = sum(p["durationMs"]["triggerExecution"] for p in with_input) / 1000
    # after the first micro-batch (query planning, Python workers' start, JIT): the steady rate
    later = with_input[1:]
    later_s = sum(p["durationMs"]["triggerExecution"] for p in later) / 1000
    state_rows = max((sum(op["numRowsTotal"] for op in p["stateOperators"]) for p in progress), default=0)
    state_bytes = sum(f.stat().st_size for f in (checkpoint / "state").rglob("*") if f.is_file())
    return {
        "events_per_s": round(events / busy_s), "end_to_end_events_per_s": round(events / end_to_end_s),
        "after_first_batch_events_per_s": round(sum(p["numInputRows"] for p in later) / later_s) if later else None,
        "first_batch_ms": with_input[0]["durationMs"]["triggerExecution"],
        "micro_batches": len(progress), "micro_batches_with_input": len(with_input),  # p50/p95 of these
        "batch_ms_p50": round(statistics.median(durations)),
        "batch_ms_p95": round(durations[min(len(durations) - 1, int(0.95 * len(durations)))]),
        "state_rows_max": state_rows, "state_bytes_on_disk": state_bytes,
    }


def run_session_window(spark, directory: Path, workdir: Path, files: int, files_per_trigger: int,
                       gap_ms: int, events: int) -> dict:
    from pyspark.sql import functions as F

    checkpoint = workdir / "ckpt-session-window"
    frame = _stream(spark, directory, files_per_trigger)
    sessions = (frame.select(F.get_json_object(F.col("value").cast("string"), "$.location_id").alias("group_key"),
                             F.col("timestamp").alias("ts"))
                .withWatermark("ts", f"{gap_ms} milliseconds")
                .groupBy("group_key", F.session_window("ts", f"{gap_ms} milliseconds")).count())
    started = time.perf_counter()
    query = (sessions.writeStream.queryName("session_window").format("noop").outputMode("append")
             .option("checkpointLocation", str(checkpoint)).trigger(processingTime="0 seconds").start())
    rows_in = lambda: sum(p["numInputRows"] for p in query.recentProgress)
    state_rows = lambda p: sum(op["numRowsTotal"] for op in p["stateOperators"])
    # done: every record read (+ the sentinel) and only the sentinel's session left in state
    _wait(query, lambda: rows_in() >= events + 1 and query.lastProgress is not None
          and state_rows(query.lastProgress) <= 1 and not query.status["isTriggerActive"], timeout_s=1800)
    end_to_end = time.perf_counter() - started
    progress = list(query.recentProgress)
    query.stop()
    out = _figures(progress, events, end_to_end, checkpoint)
    out["sessions"] = sum(op.get("numRowsRemoved", 0) for p in progress for op in p["stateOperators"])
    return out


def run_aggregator(spark, directory: Path, workdir: Path, files: int, files_per_trigger: int,
                   policy: Policy, events: int, shards: int = DEFAULT_SHARDS, names: FieldNames | None = None) -> dict:
    from consolidator.spark.delivery import BatchWriter
    from consolidator.spark.streaming import aggregate
    from consolidator.spark.transforms import records

    checkpoint, out = workdir / "ckpt-aggregator", workdir / "batches.jsonl"
    output = aggregate(records(_stream(spark, directory, files_per_trigger)), policy, names or FieldNames(),
                       shards=shards)
    writer = BatchWriter(f"file://{out}", f"file://{workdir / 'dead.jsonl'}")
    started = time.perf_counter()
    query = (output.writeStream.queryName("aggregator").foreachBatch(writer)
             .option("checkpointLocation", str(checkpoint)).trigger(processingTime="0 seconds").start())
    rows_in = lambda: sum(p["numInputRows"] for p in query.recentProgress)

    def written() -> tuple[int, int]:
        """Batches and events in the file so far: whole lines only (the writer may be mid-line)."""
        text = out.read_bytes() if out.exists() else b""
        lines = text[:text.rfind(b"\n") + 1].splitlines()
        return len(lines), sum(json.loads(line)["event_count"] for line in lines)

    # done: every record read and every event out (batches count each coalesced event)
    _wait(query, lambda: rows_in() >= events and written()[1] >= events, timeout_s=1800)
    end_to_end = time.perf_counter() - started
    progress = list(query.recentProgress)
    query.stop()
    writer.close()
    batches, events_out = written()
    if events_out != events:
        raise AssertionError(f"aggregator wrote {events_out} events in {batches} batches, expected {events}")
    figures = _figures(progress, events, end_to_end, checkpoint)
    figures["batches"] = batches
    return figures


def _discarding_processor():
    from pyspark.sql.streaming import StatefulProcessor

    class Discard(StatefulProcessor):
        """Reads every input frame, keeps nothing, emits nothing."""

        def init(self, handle) -> None:
            pass

        def handleInputRows(self, key, rows, timerValues):
            for _ in rows:
                pass
            return iter(())

        def close(self) -> None:
            pass

    return Discard()


def run_ceiling(spark, directory: Path, workdir: Path, files_per_trigger: int, events: int,
                shards: int = DEFAULT_SHARDS) -> dict:
    """The aggregator's query (decode, records packed per shard, ``transformWithStateInPandas``,
    writer) with a processor that drops its input: the framework's own cost."""
    from consolidator.rules.events import FieldNames
    from consolidator.spark.delivery import BatchWriter
    from consolidator.spark.streaming import OUTPUT_SCHEMA, by_shard
    from consolidator.spark.transforms import records

    checkpoint = workdir / "ckpt-ceiling"
    source = records(_stream(spark, directory, files_per_trigger))
    output = by_shard(source, FieldNames(), 262_144, shards).transformWithStateInPandas(
        statefulProcessor=_discarding_processor(), outputStructType=OUTPUT_SCHEMA, outputMode="Append",
        timeMode="ProcessingTime")
    writer = BatchWriter(f"file://{workdir / 'ceiling.jsonl'}", f"file://{workdir / 'ceiling-dead.jsonl'}")
    started = time.perf_counter()
    query = (output.writeStream.queryName("ceiling").foreachBatch(writer)
             .option("checkpointLocation", str(checkpoint)).trigger(processingTime="0 seconds").start())
    _wait(query, lambda: sum(p["numInputRows"] for p in query.recentProgress) >= events, timeout_s=1800)
    end_to_end = time.perf_counter() - started
    progress = list(query.recentProgress)
    query.stop()
    writer.close()
    return _figures(progress, events, end_to_end, checkpoint)


def warm_up(spark, workdir: Path, events: int, args, policy: Policy, gap_ms: int) -> None:
    """Each query once on ``events`` records of its own, results dropped."""
    data = workdir / "warmup"
    files = generate(data, events, args.groups, args.file_records, args.span_ms)
    for name in ("warm-aggregator", "warm-aggregator-json", "warm-ceiling", "warm-session"):
        (workdir / name).mkdir()
    run_aggregator(spark, data, workdir / "warm-aggregator", files, args.files_per_trigger, policy, events,
                   args.state_shards)
    run_aggregator(spark, data.with_name("warmup-json"), workdir / "warm-aggregator-json", files,
                   args.files_per_trigger, policy, events, args.state_shards)
    run_ceiling(spark, data, workdir / "warm-ceiling", args.files_per_trigger, events, args.state_shards)
    _sentinel(data, files, args.span_ms)
    run_session_window(spark, data, workdir / "warm-session", files + 1, args.files_per_trigger, gap_ms, events)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=2_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--file-records", type=int, default=10_000)
    parser.add_argument("--files-per-trigger", type=int, default=5)
    parser.add_argument("--span-ms", type=int, default=3_600_000, help="Event-time span of the input.")
    parser.add_argument("--debounce-ms", type=int, default=2_000)
    parser.add_argument("--hard-window-ms", type=int, default=10_000)
    parser.add_argument("--gap-ms", type=int, default=None,
                        help="Baseline session gap in event time (default 60 s: the input spaces a group's "
                             "events about 7 s apart, so one session per group).")
    parser.add_argument("--state-shards", type=int, default=DEFAULT_SHARDS)
    parser.add_argument("--generic-events", type=int, default=100_000,
                        help="Records of the generic run (bench/generic.py: ~1 KB, full payload, four outputs).")
    parser.add_argument("--warmup-events", type=int, default=100_000,
                        help="Records each query first runs on, unmeasured (0: no warm-up).")
    parser.add_argument("--save", type=Path, help="also write the JSON line to this file (for bench/capacity.py)")
    args = parser.parse_args(argv)
    policy = Policy(debounce_ms=args.debounce_ms, hard_window_ms=args.hard_window_ms)
    cores = int(args.master.removeprefix("local[").rstrip("]")) if args.master.startswith("local[") else None
    spark = build_session("consolidator-bench-stream", master=args.master, stream=True,  # the job's settings
                          extra={"spark.driver.memory": "2g", "spark.sql.streaming.numRecentProgressUpdates": "100000"})
    workdir = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    try:
        data = workdir / "events"
        t0 = time.perf_counter()
        files = generate(data, args.events, args.groups, args.file_records, args.span_ms)
        print(f"generated {args.events:,} records in {files} files ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
        gap_ms = args.gap_ms or 60_000
        if args.warmup_events:
            t0 = time.perf_counter()
            warm_up(spark, workdir, args.warmup_events, args, policy, gap_ms)
            print(f"warmed up on {args.warmup_events:,} records ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
        aggregator = run_aggregator(spark, data, workdir, files, args.files_per_trigger, policy, args.events,
                                    args.state_shards)
        print(f"aggregator: {aggregator}", file=sys.stderr)
        ceiling = run_ceiling(spark, data, workdir, args.files_per_trigger, args.events, args.state_shards)
        print(f"ceiling: {ceiling}", file=sys.stderr)
        _sentinel(data, files, args.span_ms)
        baseline = run_session_window(spark, data, workdir, files + 1, args.files_per_trigger, gap_ms, args.events)
        print(f"session_window: {baseline}", file=sys.stderr)
        (workdir / "json").mkdir()
        aggregator_json = run_aggregator(spark, data.with_name("events-json"), workdir / "json", files,
                                         args.files_per_trigger, policy, args.events, args.state_shards)
        print(f"aggregator (JSON lines): {aggregator_json}", file=sys.stderr)
        # the generic shape, a small run on its own ~1 KB events, after a warm-up of its own
        generic_data = workdir / "generic"
        generic_files = generate(generic_data, args.generic_events, args.groups, args.file_records, args.span_ms,
                                 generic=True)
        if args.warmup_events:
            warm_events = min(args.warmup_events, 20_000)
            warm_files = generate(workdir / "warm-generic-data", warm_events, args.groups, args.file_records,
                                  args.span_ms, generic=True)
            (workdir / "warm-generic").mkdir()
            run_aggregator(spark, workdir / "warm-generic-data", workdir / "warm-generic", warm_files,
                           args.files_per_trigger, policy, warm_events, args.state_shards, GENERIC_NAMES)
        (workdir / "generic-out").mkdir()
        generic = run_aggregator(spark, generic_data, workdir / "generic-out", generic_files, args.files_per_trigger,
                                 policy, args.generic_events, args.state_shards, GENERIC_NAMES)
        print(f"aggregator (generic shape): {generic}", file=sys.stderr)
        # the files are read in parallel: a watermark of the whole span drops no record as late
        flink = flink_session_window(data.with_name("events-json"), workdir / "warmup-json", gap_ms,
                                     cores or 2, watermark_ms=-(-args.span_ms // 3_600_000) * 3_600_000)
        if flink["events"] != args.events:
            raise SystemExit(f"Flink counted {flink['events']} of {args.events} events: not the same work")
        flink["events_per_s"] = round(args.events / flink["seconds"])
        flink["events_per_s_per_core"] = round(flink["events_per_s"] / (cores or 2))
        print(f"Flink session window (JSON lines): {flink}", file=sys.stderr)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        spark.stop()
    figures = {
        "benchmark": "stream", "events": args.events, "groups": args.groups, "master": args.master,
        "files_per_trigger": args.files_per_trigger, "file_records": args.file_records,
        "policy": {"debounce_ms": policy.debounce_ms, "hard_window_ms": policy.hard_window_ms,
                   "max_batch_size": policy.max_batch_size},
        "session_gap_ms": gap_ms, "state_shards": args.state_shards,
        "warmup_events": args.warmup_events,
        "aggregator": aggregator, "ceiling": ceiling, "session_window": baseline,
        "events_per_s": aggregator["events_per_s"],
        "events_per_s_per_core": round(aggregator["events_per_s"] / cores) if cores else None,
        "nexmark_q11_events_per_s_per_core": NEXMARK_Q11_EVENTS_PER_CORE,
        "ratio_after_first_batch": round(aggregator["after_first_batch_events_per_s"]
                                         / baseline["after_first_batch_events_per_s"], 3),
        "ratio_vs_streaming_session_window": round(aggregator["events_per_s"] / baseline["events_per_s"], 3),
        "ceiling_ratio": round(ceiling["events_per_s"] / baseline["events_per_s"], 3),
        "ceiling_ratio_after_first_batch": round(ceiling["after_first_batch_events_per_s"]
                                                 / baseline["after_first_batch_events_per_s"], 3),
        "aggregator_json": aggregator_json, "flink_session_window": flink,
        "generic": generic, "generic_ratio_vs_aggregator": round(generic["events_per_s"] / aggregator["events_per_s"], 3),
        "ratio_vs_flink_session_window": round(aggregator_json["events_per_s"] / flink["events_per_s"], 3),
    }
    print(json.dumps(figures))
    if args.save:
        args.save.write_text(json.dumps(figures) + "\n")
    return figures


if __name__ == "__main__":
    main()
