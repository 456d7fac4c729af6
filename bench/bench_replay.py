"""Benchmark: the Spark replay against Spark's built-in ``session_window`` on the same data.

    python bench/bench_replay.py [--events 1000000] [--groups 2000] [--master local[2]]

Generates ``--events`` order events over ``--groups`` groups (one day of traffic, Parquet in a
temporary directory), then times, on the same session and data:

- baseline: ``groupBy(group key, session_window(timestamp, debounce)).count()``;
- replay: decode (Spark's string functions, ``events.decode`` for what they cannot prove) +
  per-group simulation of the default policy + batch messages (v1).

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

from consolidator.policy import Policy
from consolidator.spark.replay import NamedPolicy, policy_name, replay
from consolidator.spark.session import build_session
from consolidator.spark.transforms import records

DAY_MS = 86_400_000
START_MS = 1_795_000_020_000


def generate(spark, path: str, events: int, groups: int) -> None:
    """Deterministic events: group = hash(id) mod groups, 50 orders per group, one day."""
    from pyspark.sql import functions as F

    ids = spark.range(events, numPartitions=8)
    group = F.concat(F.lit("WH-"), (F.abs(F.hash("id")) % groups).cast("string"))
    order = F.concat(group, F.lit("-O"), (F.abs(F.hash(F.col("id") * 7 + 1)) % 50).cast("string"))
    value = F.to_json(F.struct(
        group.alias("location_id"), order.alias("order_id"),
        F.array(F.struct(F.concat(F.lit("SKU-"), (F.col("id") % 20).cast("string")).alias("sku"),
                         (F.col("id") % 7).alias("quantity"))).alias("items")))
    timestamp = F.lit(START_MS) + (F.col("id") * DAY_MS / events).cast("long") + (F.abs(F.hash(F.col("id") + 3)) % 5_000)
    (ids.select(F.lit("orders").alias("topic"), (F.col("id") % 8).cast("int").alias("partition"),
                (F.col("id") / 8).cast("long").alias("offset"), timestamp.alias("timestamp"),
                group.cast("binary").alias("key"), value.cast("binary").alias("value"))
     .write.mode("overwrite").parquet(path))


def tree_cpu_seconds() -> float:
    """CPU time (user + system) of this process and every process under it (the local JVM, its
    Python workers), reaped children included. Linux only; 0.0 elsewhere."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc/self/stat").exists() else ():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except (OSError, ValueError):
            continue
        fields = text[text.rindex(")") + 2:].split()
        stats[int(entry.name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick)
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo.extend(children.get(pid, ()))
    return total


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


def time_replay(spark, path: str, policy: Policy) -> tuple[float, float, int]:
    from pyspark.sql import functions as F

    result = replay(records(spark.read.parquet(path)), [NamedPolicy(policy_name(policy), policy)])
    return *timed(result), result.where(F.col("kind") == "batch").count()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=2_000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    policy = Policy()
    spark = build_session("consolidator-bench-replay", master=args.master,
                          extra={"spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "4"})
    workdir = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    try:
        data, warm = str(workdir / "events"), str(workdir / "warm")
        generate(spark, data, args.events, args.groups)
        generate(spark, warm, 20_000, 50)
        time_session_window(spark, warm, policy)  # warm-up: JVM, Python workers, Arrow
        time_replay(spark, warm, policy)
        baseline_s, baseline_cpu, sessions = time_session_window(spark, data, policy)
        replay_s, replay_cpu, batches = time_replay(spark, data, policy)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        spark.stop()
    replay_eps, baseline_eps = args.events / replay_s, args.events / baseline_s
    print(f"session_window: {baseline_s:8.2f} s  {baseline_eps:12,.0f} events/s  {sessions:,} sessions"
          f"  cpu {baseline_cpu:.2f} s", file=sys.stderr)
    print(f"replay:         {replay_s:8.2f} s  {replay_eps:12,.0f} events/s  {batches:,} batches"
          f"  cpu {replay_cpu:.2f} s", file=sys.stderr)
    figures = {
        "benchmark": "replay", "events": args.events, "groups": args.groups, "master": args.master,
        "policy": policy_name(policy), "replay_seconds": round(replay_s, 3),
        "replay_events_per_s": round(replay_eps), "session_window_seconds": round(baseline_s, 3),
        "session_window_events_per_s": round(baseline_eps), "batches": batches, "sessions": sessions,
        "ratio_vs_session_window": round(replay_eps / baseline_eps, 3),
        "replay_cpu_seconds": round(replay_cpu, 2), "session_window_cpu_seconds": round(baseline_cpu, 2),
        "cpu_ratio_vs_session_window": round(baseline_cpu / replay_cpu, 3) if replay_cpu else None,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
