"""Report: the recommendation under --max-p95 and what the page says (no Spark needed)."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("matplotlib")

from consolidator.cli.spark.report import recommend, write_report
from consolidator.spark.figures import InputSummary, PolicyFigures

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


def test_policies_by_short_id_with_a_key_the_dominated_ones_and_the_worst_groups(tmp_path):
    worst = ({"group_key": "WH-hot", "latency_p95_ms": 1_790_000.0, "latency_max_ms": 1_800_000, "batches": 40},)
    figures = [replace(f, worst_groups=worst) for f in FIGURES]
    paths = write_report(figures, tmp_path, max_p95_ms=400_000)
    page, markdown = paths["html"].read_text(), paths["markdown"].read_text()
    assert "<tr><th></th><th>P1</th><th>P2</th><th>P3</th><th>P4</th></tr>" in page  # short ids, no wrapping names
    assert "| P3 | `d600s-h1800s-n500-t30s` | P4 |" in markdown  # same compaction, higher p95: dominated by P4
    assert "| P1 | `d60s-h1800s-n500-t30s` | - |" in markdown and "| P2 | `d300s-h1800s-n500-t30s` | - |" in markdown
    assert "| P1 | `WH-hot` | 1790.0 s | 1800.0 s | 40 |" in markdown
    assert "Worst groups" in page and "<code>WH-hot</code>" in page
    assert "Near tie" not in markdown


def test_a_near_tie_is_called_out():
    from consolidator.cli.spark.report import recommendation_text

    figures = [*FIGURES, replace(BASE, policy="d550s-h3600s-n500-t30s", compaction_ratio=8.9, latency_p95_ms=800_000.0)]
    text = recommendation_text(figures, 10**9)
    assert text.startswith("Recommended for p95 latency <= 1000000.0 s: P4 `d600s-h3600s-n500-t30s`")
    assert ("Near tie: P3 `d600s-h1800s-n500-t30s` (compaction 9.00, p95 900.0 s), P5 `d550s-h3600s-n500-t30s`"
            " (compaction 8.90, p95 800.0 s) are within 2% of its compaction") in text


def test_chart_labels_never_overlap():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from consolidator.cli.spark.report_chart import _place_labels

    fig, axis = plt.subplots(figsize=(10, 6))
    points = [(5.0 + i * 0.02, 300.0 + (i % 3) * 2, f"P{i + 1}") for i in range(8)]  # a tight cluster
    axis.scatter([x for x, _, _ in points], [y for _, y, _ in points])
    axis.set_xlim(0, 10)
    axis.set_ylim(0, 600)
    fig.canvas.draw()
    labels = _place_labels(axis, points)
    renderer = fig.canvas.get_renderer()
    boxes = [label.get_window_extent(renderer) for label in labels]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), (a, b)
    plt.close(fig)


def test_chart_names_the_bound_and_the_hard_window_when_they_are_equal(tmp_path):
    """--max-p95 equal to the hard window: both are in the legend (the dotted line used to hide the
    dashed one and its label)."""
    from unittest import mock

    import matplotlib.axes

    seen = []
    real = matplotlib.axes.Axes.legend

    def legend(self, *args, **kwargs):
        handle = real(self, *args, **kwargs)
        seen.extend(text.get_text() for text in handle.get_texts())
        return handle

    with mock.patch.object(matplotlib.axes.Axes, "legend", legend):
        write_report(FIGURES, tmp_path, max_p95_ms=1_800_000)
    assert any(t.startswith("hard window") for t in seen) and any(t.startswith("--max-p95 1800 s") for t in seen)
    assert any(t.startswith("dominated") for t in seen)


def test_a_tie_goes_to_the_simpler_policy_without_a_rate_limit():
    limited = replace(BASE, policy="d300s-h1800s-n500-t30s-r5per60s", rate_limit="5/60s")
    plain = replace(BASE, policy="d300s-h1800s-n500-t30s")
    assert recommend([limited, plain], 10**9) is plain  # "-r..." sorts after by name too: check both orders
    named_first = replace(limited, policy="a-limited")
    assert recommend([named_first, plain], 10**9) is plain


def test_the_near_tie_advice_names_only_the_settings_that_differ():
    from consolidator.cli.spark.report import recommendation_text

    best = replace(BASE, policy="d300s-h1800s-n500-t30s")
    limited = replace(BASE, policy="d300s-h1800s-n500-t30s-r5per60s", rate_limit="5/60s", compaction_ratio=9.9)
    text = recommendation_text([best, limited], 10**9)
    assert "they differ in rate limit: choose on what the figures do not measure (no rate limit is simpler" in text
    assert "debounce" not in text and "smaller batch" not in text
