"""The replay report's chart: p95 latency against compaction, one point per policy.

Each point is labelled with the policy's short id (``P1`` ...; the report prints the key), and
no two labels overlap: a label goes to the first of several positions around its point whose box
meets no label placed before it nor the plot's edge. The policies no other one dominates (see
:mod:`consolidator.cli.spark.report_choice`) are filled points joined by a line, the dominated ones
hollow and grey. Reference lines (each hard window dashed, ``--max-p95`` dotted, with the region
above it shaded) are named in the legend, never written over each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from consolidator.cli.spark.report_choice import dominated, recommend, short_ids

# label offsets (points) tried in turn: right, above, left, below, then the diagonals, farther out
_OFFSETS = [(6, 4), (0, 10), (-6, 4), (0, -14), (8, 12), (-8, 12), (8, -14), (-8, -14),
            (14, 0), (-14, 0), (0, 22), (0, -26), (22, 14), (-22, 14), (22, -18), (-22, -18)]


def _place_labels(axis, points: list[tuple[float, float, str]]) -> list:
    """Annotate each (x, y, text) at the first offset whose label box overlaps no label placed
    before and stays inside the axes; the last offset tried is kept when none fits."""
    renderer = axis.figure.canvas.get_renderer()
    inside = axis.get_window_extent(renderer)
    placed, boxes = [], []
    for x, y, text in points:
        for dx, dy in _OFFSETS:
            label = axis.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=9,
                                  ha="left" if dx > 0 else "right" if dx < 0 else "center",
                                  va="bottom" if dy > 0 else "top" if dy < 0 else "center")
            box = label.get_window_extent(renderer).expanded(1.1, 1.2)
            fits = (inside.contains(box.x0, box.y0) and inside.contains(box.x1, box.y1)
                    and not any(box.overlaps(other) for other in boxes))
            if fits or (dx, dy) == _OFFSETS[-1]:
                break
            label.remove()
        placed.append(label)
        boxes.append(box)
    return placed


def render_chart(figures: Sequence, path: Path, max_p95_ms: float | None = None) -> Path:
    """Write the chart of ``figures`` (:class:`consolidator.cli.spark.report.PolicyFigures`) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ids, beaten = short_ids(figures), dominated(figures)
    fig, axis = plt.subplots(figsize=(10, 6))
    xs = {f.policy: f.compaction_ratio for f in figures}
    ys = {f.policy: f.latency_p95_ms / 1000 for f in figures}
    front = sorted((f for f in figures if f.policy not in beaten and f.batches_out), key=lambda f: xs[f.policy])
    rest = [f for f in figures if f.policy in beaten]
    axis.plot([xs[f.policy] for f in front], [ys[f.policy] for f in front], "-o", color="#4c72b0", zorder=3,
              label="not dominated (no policy has both more compaction and less latency)")
    if rest:
        axis.scatter([xs[f.policy] for f in rest], [ys[f.policy] for f in rest], facecolors="none",
                     edgecolors="#999999", zorder=3, label="dominated (another policy is better on both)")
    top = max([*ys.values(), *(f.hard_window_ms / 1000 for f in figures)]) * 1.2 or 1
    axis.set_ylim(bottom=0, top=top)
    axis.set_xlim(left=0, right=max([*xs.values(), 1.0]) * 1.25)
    for index, hard in enumerate(sorted({f.hard_window_ms for f in figures})):
        axis.axhline(hard / 1000, color="#c44e52", linestyle="--", linewidth=1,
                     label="hard window(s)" if index == 0 else None)
    if max_p95_ms is not None:
        axis.axhspan(max_p95_ms / 1000, top, color="#c44e52", alpha=0.06, zorder=0)
        axis.axhline(max_p95_ms / 1000, color="#3a7d44", linestyle=":", linewidth=2,
                     label=f"--max-p95 {max_p95_ms / 1000:g} s (shaded: over it)")
        best = recommend(figures, max_p95_ms)
        if best is not None:
            axis.scatter([xs[best.policy]], [ys[best.policy]], s=260, facecolors="none", edgecolors="#3a7d44",
                         linewidths=2, zorder=4, label=f"recommended: {ids[best.policy]}")
    groups: dict[tuple[float, float], list[str]] = {}  # equal figures share a point and a label
    for f in figures:
        groups.setdefault((xs[f.policy], ys[f.policy]), []).append(ids[f.policy])
    fig.canvas.draw()
    _place_labels(axis, [(x, y, "=".join(names)) for (x, y), names in sorted(groups.items())])
    axis.set_xlabel("compaction (events per batch)")
    axis.set_ylabel("p95 latency (s, flushed_at - first_seen)")
    axis.set_title("p95 latency against compaction (labels: policy ids, key in the report)")
    axis.grid(True, alpha=0.3)
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.11), ncol=2, fontsize=8)  # below: covers no point
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
