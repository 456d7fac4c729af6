"""Replay report: figures per policy, rendered as Markdown, HTML and a PNG chart.

Figures (per policy): messages in (every input record), batches out, events batched, compaction
ratio (events batched / batches out), batch size distribution (member rows per batch),
latency percentiles (flushed_at - first_seen per member row; linear interpolation, like
numpy's default), flush reasons, dead-lettered records, expired rows (TTL) and the events in
them, batches held back by the rate limit with their wait (``held_back_ms``: p50/p95/max), and
``unbatched`` (valid, unique events neither batched nor expired: always 0 unless something is broken).
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

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
    held_back_batches: int = 0
    held_back_p50_ms: float = 0.0
    held_back_p95_ms: float = 0.0
    held_back_max_ms: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def compute_figures(result, policies) -> list[PolicyFigures]:
    """Figures of a :func:`consolidator.spark.replay.replay` result (cache it first: several passes)."""
    from pyspark.sql import functions as F

    from consolidator.spark.replay import BATCH, DEAD_LETTER, EXPIRED, SUMMARY, check_routing

    check_routing(result)
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
        F.count("*").alias("rows"), F.sum("event_count").alias("events")).collect()}
    held = {r["policy"]: r for r in batches
            .select("policy", F.get_json_object("body", "$.held_back_ms").cast("long").alias("h"))
            .where(F.col("h") > 0).groupBy("policy").agg(
                F.count("*").alias("n"), F.percentile("h", F.array(F.lit(0.5), F.lit(0.95))).alias("p"),
                F.max("h").alias("max")).collect()}
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
            batch_size_p50=float(s["p"][0]) if s else 0.0,
            batch_size_p95=float(s["p"][1]) if s else 0.0,
            batch_size_max=s["max"] if s else 0,
            batch_size_histogram={k: v for k, v in ordered_hist.items() if v},
            latency_p50_ms=float(lat["p"][0]) if lat else 0.0,
            latency_p95_ms=float(lat["p"][1]) if lat else 0.0,
            latency_p99_ms=float(lat["p"][2]) if lat else 0.0,
            latency_max_ms=int(lat["max"]) if lat else 0,
            reasons=dict(sorted(reasons.get(named.name, {}).items())),
            expired=int(gone["rows"]) if gone else 0,
            expired_events=expired_events,
            held_back_batches=int(wait["n"]) if wait else 0,
            held_back_p50_ms=float(wait["p"][0]) if wait else 0.0,
            held_back_p95_ms=float(wait["p"][1]) if wait else 0.0,
            held_back_max_ms=int(wait["max"]) if wait else 0,
        ))
    return figures


def _seconds(ms: float) -> str:
    return f"{ms / 1000:.1f} s"


_ROWS = (
    ("messages in", lambda f: f"{f.messages_in:,}"),
    ("dead-lettered", lambda f: f"{f.dead_lettered:,}"),
    ("duplicates ignored", lambda f: f"{f.replayed:,}"),
    ("events batched", lambda f: f"{f.events_batched:,}"),
    ("batches out", lambda f: f"{f.batches_out:,}"),
    ("compaction ratio", lambda f: f"{f.compaction_ratio:.2f}"),
    ("batch size min / mean / p50 / p95 / max",
     lambda f: f"{f.batch_size_min} / {f.batch_size_mean:.1f} / {f.batch_size_p50:g} / "
               f"{f.batch_size_p95:g} / {f.batch_size_max}"),
    ("latency p50", lambda f: _seconds(f.latency_p50_ms)),
    ("latency p95", lambda f: _seconds(f.latency_p95_ms)),
    ("latency p99", lambda f: _seconds(f.latency_p99_ms)),
    ("latency max", lambda f: _seconds(f.latency_max_ms)),
    ("reasons", lambda f: ", ".join(f"{k} {v:,}" for k, v in f.reasons.items()) or "-"),
    ("batch sizes", lambda f: ", ".join(f"{k}: {v:,}" for k, v in f.batch_size_histogram.items()) or "-"),
    ("expired rows (events)", lambda f: f"{f.expired:,} ({f.expired_events:,})"),
    ("throttled batches", lambda f: f"{f.held_back_batches:,}"),
    ("throttled wait p50 / p95 / max", lambda f: f"{_seconds(f.held_back_p50_ms)} / {_seconds(f.held_back_p95_ms)}"
                                                 f" / {_seconds(f.held_back_max_ms)}"),
    ("unbatched (must be 0)", lambda f: f"{f.unbatched:,}"),
)


def render_markdown(figures: Sequence[PolicyFigures], chart_name: str | None = "chart.png") -> str:
    lines = ["# Replay report", "",
             "Latency is flushed_at - first_seen per buffered row; compaction = events batched / batches out.", ""]
    lines.append("| | " + " | ".join(f"`{f.policy}`" for f in figures) + " |")
    lines.append("|---|" + "---|" * len(figures))
    for label, cell in _ROWS:
        lines.append(f"| {label} | " + " | ".join(cell(f) for f in figures) + " |")
    if chart_name:
        lines += ["", f"![batches and latency per policy]({chart_name})"]
    return "\n".join(lines) + "\n"


def render_html(figures: Sequence[PolicyFigures], chart_name: str | None = "chart.png") -> str:
    head = "".join(f"<th><code>{html.escape(f.policy)}</code></th>" for f in figures)
    body = "".join(
        f"<tr><th>{html.escape(label)}</th>" + "".join(f"<td>{html.escape(cell(f))}</td>" for f in figures) + "</tr>"
        for label, cell in _ROWS
    )
    chart = f'<p><img src="{html.escape(chart_name)}" alt="batches and latency per policy"></p>' if chart_name else ""
    return (
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Replay report</title>"
        "<style>body{font-family:sans-serif}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
        "table{border-collapse:collapse}</style></head><body><h1>Replay report</h1>"
        f"<table><tr><th></th>{head}</tr>{body}</table>{chart}</body></html>\n"
    )


def render_chart(figures: Sequence[PolicyFigures], path: Path) -> Path:
    """Two panels: batches out per policy, and latency p50/p95/p99/max per policy (seconds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [f.policy for f in figures]
    positions = range(len(figures))
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(8, 2.2 * len(figures) + 4), 4.5))
    left.bar(positions, [f.batches_out for f in figures], color="#4c72b0")
    left.set_title("batches out")
    right.set_title("latency (s)")
    width = 0.2
    for shift, (label, values) in enumerate((
        ("p50", [f.latency_p50_ms for f in figures]),
        ("p95", [f.latency_p95_ms for f in figures]),
        ("p99", [f.latency_p99_ms for f in figures]),
        ("max", [f.latency_max_ms for f in figures]),
    )):
        right.bar([p + (shift - 1.5) * width for p in positions], [v / 1000 for v in values], width, label=label)
    right.legend()
    for axis in (left, right):
        axis.set_xticks(list(positions))
        axis.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_report(figures: Sequence[PolicyFigures], out_dir: Path) -> dict[str, Path]:
    """``report.md``, ``report.html``, ``chart.png`` and ``report.json`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "chart": render_chart(figures, out_dir / "chart.png"),
        "markdown": out_dir / "report.md",
        "html": out_dir / "report.html",
        "json": out_dir / "report.json",
    }
    paths["markdown"].write_text(render_markdown(figures), encoding="utf-8")
    paths["html"].write_text(render_html(figures), encoding="utf-8")
    paths["json"].write_text(json.dumps([f.as_dict() for f in figures], indent=2, sort_keys=True) + "\n",
                             encoding="utf-8")
    return paths
