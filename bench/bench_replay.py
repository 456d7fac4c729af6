"""Benchmark: the Spark replay against Spark's built-in ``session_window`` on the same data.

    python bench/bench_replay.py [--events 1000000] [--groups 2000] [--master local[2]]

Generates ``--events`` order events over ``--groups`` groups (one day of traffic, Parquet in a
temporary directory), then times, on the same session and data:

- baseline: ``groupBy(group key, session_window(timestamp, debounce)).count()``;
- replay: decode (Spark's string functions, ``events.decode`` for what they cannot prove) +
  per-group simulation of the default policy + batch messages (v1);
- the generic shape (``bench/generic.py``: about 1 KB events, full member payload, four
  outputs) on ``--generic-events`` records: ``generic_ratio_vs_replay`` = its events/s over the
  default replay's (``--events`` records), the general path against the fast one (a small run,
  where the job's fixed cost weighs ``--events / --generic-events`` times more than on the
  default's); and on ``--events`` records, the same count as the default's:
  ``generic_ratio_same_events`` (``--generic-same-events 0`` skips it);
- the peer: Flink's SQL session window (Nexmark q11's shape, ``flink_session.py``, in Flink's own
  venv, parallelism = cores, warmed up in its own JVM) on the same records as JSON lines, and the
  replay again on those JSON lines: ``ratio_vs_flink_session_window`` = replay events/s / Flink
  events/s, both reading JSON lines (Flink's wheel reads no Parquet). Flink's time is its job's,
  submission to the last session out.

Both are forced to completion with the ``noop`` writer; a small warm-up run of each comes first.
The last line is one JSON object; ``ratio_vs_session_window`` = replay events/s / baseline
events/s (target >= 0.5). ``cpu_ratio_vs_session_window`` = baseline CPU seconds / replay CPU
seconds (this process tree: the local JVM and its Python workers), a figure that moves less than
wall time when other jobs share the machine; ``load_average`` is taken at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from flink import flink_session_window
from generic import GENERIC_NAMES
from proctree import tree_cpu_seconds

from consolidator.rules.policy import Policy
from consolidator.spark.replay import NamedPolicy, policy_name, replay
from consolidator.spark.session import build_session
from consolidator.spark.transforms import records

DAY_MS = 86_400_000
START_MS = 1_795_000_020_000


def generate(spark, path: str, events: int, groups: int, generic: bool = False) -> None:
    """Deterministic events: group = hash(id) mod groups, 50 orders per group, one day;
    ``generic``: about 1 KB events of the generic shape's layout (bench/generic.py)."""
    from pyspark.sql import functions as F

    ids = spark.range(events, numPartitions=8)
    group = F.concat(F.lit("WH-"), (F.abs(F.hash("id")) % groups).cast("string"))
    order = F.concat(group, F.lit("-O"), (F.abs(F.hash(F.col("id") * 7 + 1)) % 50).cast("string"))
    value = F.to_json(F.struct(
        group.alias("location_id"), order.alias("order_id"),
        F.array(F.struct(F.concat(F.lit("SKU-"), (F.col("id") % 20).cast("string")).alias("sku"),
                         (F.col("id") % 7).alias("quantity"))).alias("items")))
    if generic:
        value = F.to_json(F.struct(
            group.alias("location_id"), order.alias("order_id"),
            F.struct(((F.col("id") % 10_000) / 100).alias("total"), F.lit("paid").alias("status")).alias("order"),
            F.struct(F.concat(F.lit("/p/"), (F.col("id") % 20).cast("string")).alias("page"),
                     F.lit("bench/1.0 " + "x" * 800).alias("agent")).alias("context")))
    timestamp = F.lit(START_MS) + (F.col("id") * DAY_MS / events).cast("long") + (F.abs(F.hash(F.col("id") + 3)) % 5_000)
    (ids.select(F.lit("orders").alias("topic"), (F.col("id") % 8).cast("int").alias("partition"),
                (F.col("id") / 8).cast("long").alias("offset"), timestamp.alias("timestamp"),
                group.cast("binary").alias("key"), value.cast("binary").alias("value"))
     .write.mode("overwrite").parquet(path))


def timed(frame) -> tuple[float, float]:
    """Wall and CPU seconds of running ``frame`` to completion with the ``noop`` writer."""
    cpu, started = tree_cpu_seconds(), time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started, tree_cpu_seconds() - cpu


def time_session_window(spark, path: str, policy: Policy) -> tuple[float, float, int]:
    from pyspark.sql import functions as F

    frame = spark.read.parquet(path)
    sessions = (frame.select(F.get_json_object(F.col("value").cast("string"), "$.location_id").alias("group_key"),
                             F.timestamp_millis("timestamp").alias("ts"))
                .groupBy("group_key", F.session_window("ts", f"{policy.debounce_ms // 1000} seconds"))
                .count())
    return *timed(sessions), sessions.count()


def to_json_lines(spark, parquet: str, path: str) -> None:
    """The same records as JSON lines (key and value as strings, timestamp in epoch ms)."""
    from pyspark.sql import functions as F

    (spark.read.parquet(parquet)
     .select("topic", "partition", "offset", "timestamp", F.col("key").cast("string").alias("key"),
             F.col("value").cast("string").alias("value"))
     .write.mode("overwrite").json(path))


def read_json_lines(spark, path: str):
    from pyspark.sql import functions as F

    frame = spark.read.schema("topic STRING, partition INT, offset BIGINT, timestamp BIGINT, key STRING, value STRING"
                              ).json(path)
    return frame.select("topic", "partition", "offset", "timestamp", F.col("key").cast("binary").alias("key"),
                        F.col("value").cast("binary").alias("value"))


def time_replay(spark, path: str, policy: Policy, json_lines: bool = False,
                generic: bool = False) -> tuple[float, float, int]:
    from pyspark.sql import functions as F

    source = read_json_lines(spark, path) if json_lines else spark.read.parquet(path)
    result = replay(records(source), [NamedPolicy(policy_name(policy), policy)],
                    *((GENERIC_NAMES,) if generic else ()))
    return *timed(result), result.where(F.col("kind") == "batch").count()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=2_000)
    parser.add_argument("--generic-events", type=int, default=100_000, help="events of the generic run")
    parser.add_argument("--generic-same-events", type=int, choices=(0, 1), default=1,
                        help="1: also time the generic shape on --events records")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--save", type=Path, help="also write the JSON line to this file (for bench/capacity.py)")
    args = parser.parse_args(argv)
    policy = Policy()
    cores = int(args.master.removeprefix("local[").rstrip("]")) if args.master.startswith("local[") else os.cpu_count()
    spark = build_session("consolidator-bench-replay", master=args.master,
                          extra={"spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "4"})
    workdir = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    try:
        data, warm = str(workdir / "events"), str(workdir / "warm")
        generate(spark, data, args.events, args.groups)
        generate(spark, warm, 20_000, 50)
        data_json, warm_json = str(workdir / "events-json"), str(workdir / "warm-json")
        to_json_lines(spark, data, data_json)
        to_json_lines(spark, warm, warm_json)
        time_session_window(spark, warm, policy)  # warm-up: JVM, Python workers, Arrow
        time_replay(spark, warm, policy)
        time_replay(spark, warm_json, policy, json_lines=True)
        baseline_s, baseline_cpu, sessions = time_session_window(spark, data, policy)
        replay_s, replay_cpu, batches = time_replay(spark, data, policy)
        replay_json_s, replay_json_cpu, _ = time_replay(spark, data_json, policy, json_lines=True)
        generic_data = str(workdir / "generic")
        generate(spark, generic_data, args.generic_events, args.groups, generic=True)
        time_replay(spark, warm, policy, generic=True)  # its own warm-up: the general path
        generic_s, generic_cpu, _ = time_replay(spark, generic_data, policy, generic=True)
        same_s = same_cpu = None
        if args.generic_same_events:
            same_data = str(workdir / "generic-same")
            generate(spark, same_data, args.events, args.groups, generic=True)
            same_s, same_cpu, _ = time_replay(spark, same_data, policy, generic=True)
        # the JSON files are read in parallel, each spanning the day: a watermark short of the
        # span would drop records as late (Spark's batch session_window drops none)
        flink = flink_session_window(Path(data_json), Path(warm_json), policy.debounce_ms, cores,
                                     watermark_ms=2 * DAY_MS)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        spark.stop()
    replay_eps, baseline_eps = args.events / replay_s, args.events / baseline_s
    replay_json_eps, flink_eps = args.events / replay_json_s, args.events / flink["seconds"]
    if flink["events"] != args.events:
        raise SystemExit(f"Flink counted {flink['events']} of {args.events} events in its sessions: not the same work")
    print(f"session_window: {baseline_s:8.2f} s  {baseline_eps:12,.0f} events/s  {sessions:,} sessions"
          f"  cpu {baseline_cpu:.2f} s", file=sys.stderr)
    print(f"replay:         {replay_s:8.2f} s  {replay_eps:12,.0f} events/s  {batches:,} batches"
          f"  cpu {replay_cpu:.2f} s", file=sys.stderr)
    print(f"replay (JSON):  {replay_json_s:8.2f} s  {replay_json_eps:12,.0f} events/s"
          f"  cpu {replay_json_cpu:.2f} s", file=sys.stderr)
    generic_eps = args.generic_events / generic_s
    print(f"replay generic: {generic_s:8.2f} s  {generic_eps:12,.0f} events/s  ({args.generic_events:,} ~1 KB events,"
          f" full payload, four outputs)  cpu {generic_cpu:.2f} s", file=sys.stderr)
    same_eps = None if same_s is None else args.events / same_s
    if same_s is not None:
        print(f"replay generic: {same_s:8.2f} s  {same_eps:12,.0f} events/s  ({args.events:,} events, as the default)"
              f"  cpu {same_cpu:.2f} s", file=sys.stderr)
    print(f"Flink session:  {flink['seconds']:8.2f} s  {flink_eps:12,.0f} events/s  {flink['sessions']:,} sessions"
          f"  cpu {flink['cpu_seconds']:.2f} s (JSON lines, parallelism {cores})", file=sys.stderr)
    figures = {
        "benchmark": "replay", "events": args.events, "groups": args.groups, "master": args.master,
        "policy": policy_name(policy), "replay_seconds": round(replay_s, 3),
        "replay_events_per_s": round(replay_eps), "session_window_seconds": round(baseline_s, 3),
        "session_window_events_per_s": round(baseline_eps), "batches": batches, "sessions": sessions,
        "ratio_vs_session_window": round(replay_eps / baseline_eps, 3),
        "replay_cpu_seconds": round(replay_cpu, 2), "session_window_cpu_seconds": round(baseline_cpu, 2),
        "cpu_ratio_vs_session_window": round(baseline_cpu / replay_cpu, 3) if replay_cpu else None,
        "replay_json_seconds": round(replay_json_s, 3), "replay_json_events_per_s": round(replay_json_eps),
        "replay_json_cpu_seconds": round(replay_json_cpu, 2),
        "generic_events": args.generic_events, "generic_events_per_s": round(generic_eps),
        "generic_cpu_seconds": round(generic_cpu, 2), "generic_ratio_vs_replay": round(generic_eps / replay_eps, 3),
        "generic_same_events_per_s": None if same_eps is None else round(same_eps),
        "generic_same_cpu_seconds": None if same_cpu is None else round(same_cpu, 2),
        "generic_ratio_same_events": None if same_eps is None else round(same_eps / replay_eps, 3),
        "flink_session_window_seconds": flink["seconds"], "flink_session_window_events_per_s": round(flink_eps),
        "flink_session_window_cpu_seconds": flink["cpu_seconds"], "flink_sessions": flink["sessions"],
        "flink_events": flink["events"], "flink_parallelism": cores,
        "ratio_vs_flink_session_window": round(replay_json_eps / flink_eps, 3),
        "cpu_ratio_vs_flink_session_window": round(flink["cpu_seconds"] / replay_json_cpu, 3) if replay_json_cpu else None,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(figures))
    if args.save:
        args.save.write_text(json.dumps(figures) + "\n")
    return figures


if __name__ == "__main__":
    main()
