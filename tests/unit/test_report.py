"""Report: the recommendation under --max-p95 and what the page says (no Spark needed)."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("matplotlib")

from consolidator.spark.report import InputSummary, PolicyFigures, recommend, write_report

BASE = PolicyFigures(
    policy="", debounce_ms=300_000, hard_window_ms=1_800_000, max_batch_size=500, tick_interval_ms=30_000,
    messages_in=100, dead_lettered=0, replayed=0, events_batched=100, unbatched=0, batches_out=10,
    compaction_ratio=10.0, batch_size_min=1, batch_size_mean=5.0, batch_size_p50=5.0, batch_size_p95=9.0,
    batch_size_max=10, batch_size_histogram={"1": 10}, latency_p50_ms=100_000.0, latency_p95_ms=300_000.0,
    latency_p99_ms=400_000.0, latency_max_ms=500_000, reasons={"idle": 10},
)
FIGURES = [
    replace(BASE, policy="d60s-h1800s-n500-t30s", debounce_ms=60_000, compaction_ratio=2.0, latency_p95_ms=90_000.0),
    replace(BASE, policy="d300s-h1800s-n500-t30s", compaction_ratio=5.0, latency_p95_ms=400_000.0),
    replace(BASE, policy="d600s-h1800s-n500-t30s", debounce_ms=600_000, compaction_ratio=9.0,
            latency_p95_ms=900_000.0),
    replace(BASE, policy="d600s-h3600s-n500-t30s", debounce_ms=600_000, hard_window_ms=3_600_000,
            compaction_ratio=9.0, latency_p95_ms=850_000.0),
]


def test_recommend_picks_the_best_compaction_within_the_bound():
    assert recommend(FIGURES, 400_000).policy == "d300s-h1800s-n500-t30s"
    assert recommend(FIGURES, 399_999).policy == "d60s-h1800s-n500-t30s"
    assert recommend(FIGURES, 10**9).policy == "d600s-h3600s-n500-t30s"  # tie on compaction: lower p95
    assert recommend(FIGURES, 1_000) is None


def test_report_says_what_the_input_was_and_what_to_pick(tmp_path):
    source = InputSummary("json history/", ("history/a.jsonl", "history/b.jsonl"), 1234, 56,
                          1_795_000_000_000, 1_795_086_400_000)
    paths = write_report(FIGURES, tmp_path, source, max_p95_ms=400_000)
    page = paths["html"].read_text()
    for text in ("records: 1,234", "groups: 56", "2 file(s): history/a.jsonl, history/b.jsonl",
                 "(24.0 h)", "<code>d300s-h1800s-n500-t30s</code>: compaction 5.00", "hard window 1800 s",
                 "debounce 300 s", "<code>-r2per60s</code> is a rate limit of 2 batches per 60 s",
                 "<code>-ttl21600s</code> a time-to-live of 21600 s"):
        assert text in page, text
    assert paths["chart"].stat().st_size > 10_000
    none = write_report(FIGURES, tmp_path / "none", source, max_p95_ms=1_000).get("markdown").read_text()
    assert "No policy keeps p95 latency within 1.0 s" in none
