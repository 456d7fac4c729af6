"""The replay's figures per policy, computed with Spark from the replay's output: messages in
(every input record), batches out, events batched, compaction ratio (events batched / batches
out), batch size distribution (member rows per batch), latency percentiles (flushed_at -
first_seen per member row; linear interpolation, like numpy's default), flush reasons,
dead-lettered records, expired rows (TTL) and the events in them, batches held back by the rate
limit with their wait (``held_back_ms``: p50/p95/max), and ``unbatched`` (valid, unique events
neither batched nor expired: always 0 unless something is broken). The report renders them
(:mod:`consolidator.cli.spark.report`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

WORST_GROUPS = 3  # groups shown per policy: the highest p95 latency


def _pct(value) -> float:
    """A percentile to 3 decimals: Spark's interpolation differs in the last bits between
    versions (4.0.2 gives 289500.00000000006 where 4.3.0 gives 289500.0)."""
    return round(float(value), 3)


SIZE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)  # upper bounds (inclusive)


def size_bucket(size: int) -> str:
    lower = 1
    for upper in SIZE_BUCKETS:
        if size <= upper:
            return str(upper) if lower == upper else f"{lower}-{upper}"
        lower = upper + 1
    return f">{SIZE_BUCKETS[-1]}"


@dataclass(frozen=True)
class PolicyFigures:
    policy: str
    debounce_ms: int
    hard_window_ms: int
    max_batch_size: int
    tick_interval_ms: int
    messages_in: int
    dead_lettered: int
    replayed: int
    events_batched: int
    unbatched: int
    batches_out: int
    compaction_ratio: float
    batch_size_min: int
    batch_size_mean: float
    batch_size_p50: float
    batch_size_p95: float
    batch_size_max: int
    batch_size_histogram: dict[str, int]
    latency_p50_ms: float
    latency_p95_ms: float
    latency_p99_ms: float
    latency_max_ms: int
    reasons: dict[str, int]
    # rate limit and TTL: rows expired (events in them), batches held back and for how long
    expired: int = 0
    expired_events: int = 0
    late_arrivals: int = 0  # expired rows whose event was already older than the TTL when it arrived
    rate_limit: str | None = None  # the policy's rate limit as N/period (None: no limit)
    ttl_ms: int = 0
    held_back_batches: int = 0
    held_back_p50_ms: float = 0.0
    held_back_p95_ms: float = 0.0
    held_back_max_ms: int = 0
    # the groups with the highest p95 latency: {"group_key", "latency_p95_ms", "latency_max_ms", "batches"}
    worst_groups: tuple[dict, ...] = ()

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class InputSummary:
    """What the replay read: where from, how many records and groups, which time span."""

    source: str
    files: tuple[str, ...]
    records: int
    groups: int
    first_ms: int | None
    last_ms: int | None

    def as_dict(self) -> dict:
        return asdict(self)


def describe_input(records_df, result, source: str, files: tuple[str, ...] | None = None) -> InputSummary:
    """Input figures of a replay: ``records_df`` as read (files listed when it is file-based;
    ``files``: the ones to name instead, when the records were read from a copy of them)."""
    from pyspark.sql import functions as F

    from consolidator.spark.replay import SUMMARY

    span = records_df.agg(F.count("*").alias("n"), F.min("timestamp_ms").alias("first"),
                          F.max("timestamp_ms").alias("last")).first()
    files = tuple(sorted(records_df.inputFiles())) if files is None else files  # empty for Kafka
    groups = result.where(F.col("kind") == SUMMARY).count()
    return InputSummary(source, files, int(span["n"]), groups, span["first"], span["last"])


def _rate(limit) -> str | None:
    return None if limit is None else f"{limit.batches}/{limit.period_ms / 1000:g}s"


def compute_figures(result, policies) -> list[PolicyFigures]:
    """Figures of a :func:`consolidator.spark.replay.replay` result (cache it first: several passes)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from consolidator.spark.replay import BATCH, DEAD_LETTER, EXPIRED, LATE_ARRIVAL, SUMMARY

    summary = result.where(F.col("kind") == SUMMARY).agg(
        F.coalesce(F.sum("records_in"), F.lit(0)).alias("records_in"),
        F.coalesce(F.sum("replayed"), F.lit(0)).alias("replayed"),
    ).first()
    dead = result.where(F.col("kind") == DEAD_LETTER).count()
    batches = result.where(F.col("kind") == BATCH)
    sizes = {r["policy"]: r for r in batches.groupBy("policy").agg(
        F.count("*").alias("batches"), F.sum("event_count").alias("events"),
        F.min("members").alias("min"), F.avg("members").alias("mean"), F.max("members").alias("max"),
        F.percentile("members", F.array(F.lit(0.5), F.lit(0.95))).alias("p"),
    ).collect()}
    latencies = {r["policy"]: r for r in batches.select("policy", F.explode("latencies_ms").alias("l"))
                 .groupBy("policy").agg(
                     F.percentile("l", F.array(F.lit(0.5), F.lit(0.95), F.lit(0.99))).alias("p"),
                     F.max("l").alias("max")).collect()}
    expired = {r["policy"]: r for r in result.where(F.col("kind") == EXPIRED).groupBy("policy").agg(
        F.count("*").alias("rows"), F.sum("event_count").alias("events"),
        F.sum(F.when(F.col("reason") == LATE_ARRIVAL, 1).otherwise(0)).alias("late")).collect()}
    held = {r["policy"]: r for r in batches
            .select("policy", F.get_json_object("body", "$.held_back_ms").cast("long").alias("h"))
            .where(F.col("h") > 0).groupBy("policy").agg(
                F.count("*").alias("n"), F.percentile("h", F.array(F.lit(0.5), F.lit(0.95))).alias("p"),
                F.max("h").alias("max")).collect()}
    worst: dict[str, list[dict]] = {}
    for r in (batches.select("policy", "group_key", "batch_id", F.explode("latencies_ms").alias("l"))
              .groupBy("policy", "group_key").agg(F.percentile("l", F.lit(0.95)).alias("p95"),
                                                  F.max("l").alias("max"), F.countDistinct("batch_id").alias("n"))
              .withColumn("rank", F.row_number().over(
                  Window.partitionBy("policy").orderBy(F.desc("p95"), F.desc("max"), "group_key")))
              .where(F.col("rank") <= WORST_GROUPS).orderBy("policy", "rank").collect()):
        worst.setdefault(r["policy"], []).append({"group_key": r["group_key"], "latency_p95_ms": _pct(r["p95"]),
                                                  "latency_max_ms": int(r["max"]), "batches": int(r["n"])})
    reasons: dict[str, dict[str, int]] = {}
    for r in batches.groupBy("policy", "reason").count().collect():
        reasons.setdefault(r["policy"], {})[r["reason"]] = r["count"]
    histogram: dict[str, dict[str, int]] = {}
    for r in batches.groupBy("policy", "members").count().collect():
        label = size_bucket(r["members"])
        histogram.setdefault(r["policy"], {}).setdefault(label, 0)
        histogram[r["policy"]][label] += r["count"]

    records_in, replayed = int(summary["records_in"]), int(summary["replayed"])
    figures = []
    for named in policies:
        s, lat = sizes.get(named.name), latencies.get(named.name)
        gone, wait = expired.get(named.name), held.get(named.name)
        expired_events = int(gone["events"]) if gone else 0
        batches_out = s["batches"] if s else 0
        events = int(s["events"]) if s else 0
        ordered_hist = {size_bucket(u): histogram.get(named.name, {}).get(size_bucket(u), 0)
                        for u in SIZE_BUCKETS}
        ordered_hist[f">{SIZE_BUCKETS[-1]}"] = histogram.get(named.name, {}).get(f">{SIZE_BUCKETS[-1]}", 0)
        figures.append(PolicyFigures(
            policy=named.name,
            debounce_ms=named.policy.debounce_ms,
            hard_window_ms=named.policy.hard_window_ms,
            max_batch_size=named.policy.max_batch_size,
            tick_interval_ms=named.policy.tick_interval_ms,
            messages_in=records_in + dead,
            dead_lettered=dead,
            replayed=replayed,
            events_batched=events,
            unbatched=records_in - replayed - events - expired_events,
            batches_out=batches_out,
            compaction_ratio=round(events / batches_out, 3) if batches_out else 0.0,
            batch_size_min=s["min"] if s else 0,
            batch_size_mean=round(float(s["mean"]), 3) if s else 0.0,
            batch_size_p50=_pct(s["p"][0]) if s else 0.0,
            batch_size_p95=_pct(s["p"][1]) if s else 0.0,
            batch_size_max=s["max"] if s else 0,
            batch_size_histogram={k: v for k, v in ordered_hist.items() if v},
            latency_p50_ms=_pct(lat["p"][0]) if lat else 0.0,
            latency_p95_ms=_pct(lat["p"][1]) if lat else 0.0,
            latency_p99_ms=_pct(lat["p"][2]) if lat else 0.0,
            latency_max_ms=int(lat["max"]) if lat else 0,
            reasons=dict(sorted(reasons.get(named.name, {}).items())),
            expired=int(gone["rows"]) if gone else 0,
            expired_events=expired_events,
            late_arrivals=int(gone["late"]) if gone else 0,
            rate_limit=_rate(named.policy.rate_limit),
            ttl_ms=named.policy.ttl_ms,
            held_back_batches=int(wait["n"]) if wait else 0,
            held_back_p50_ms=_pct(wait["p"][0]) if wait else 0.0,
            held_back_p95_ms=_pct(wait["p"][1]) if wait else 0.0,
            held_back_max_ms=int(wait["max"]) if wait else 0,
            worst_groups=tuple(worst.get(named.name, ())),
        ))
    return figures
