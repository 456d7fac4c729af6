"""The generated files are committed as generated: the metrics reference page and the Grafana
dashboard equal what ``consolidator docs`` prints (``make docs`` writes them), and both
dashboards come from the one panel list."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from consolidator.cli import app
from consolidator.services.metrics import METRICS, prometheus_name
from consolidator.services.panels import PANELS, promql

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _generated(command: str, committed: Path, tmp_path: Path) -> str:
    """What ``consolidator docs COMMAND`` writes; its ``--check`` passes on the committed file."""
    written = tmp_path / committed.name
    result = runner.invoke(app, ["docs", command, "--out", str(written)])
    assert result.exit_code == 0, result.output
    check = runner.invoke(app, ["docs", command, "--check", "--out", str(committed)])
    assert check.exit_code == 0, f"{committed} is stale: run `make docs` ({check.stderr})"
    return written.read_text()


def test_the_check_fails_on_a_stale_file(tmp_path):
    stale = tmp_path / "metrics.md"
    stale.write_text("# Metrics reference\n")
    result = runner.invoke(app, ["docs", "metrics", "--check", "--out", str(stale)])
    assert result.exit_code == 1 and "run `make docs`" in result.stderr


def test_the_metrics_reference_page_is_the_generated_one(tmp_path):
    path = ROOT / "docs" / "reference" / "metrics.md"
    committed = path.read_text()
    assert committed == _generated("metrics", path, tmp_path), "docs/reference/metrics.md is stale: run `make docs`"
    for metric in METRICS:  # each metric once, with its names on both runtimes
        rows = [line for line in committed.splitlines() if f"`{prometheus_name(metric)}`" in line]
        assert len(rows) == 1 and (metric.source == "worker" or f"`{metric.name}` ({metric.unit})" in rows[0])


def test_the_grafana_dashboard_is_the_generated_one_and_draws_every_panel(tmp_path):
    path = ROOT / "deploy" / "grafana" / "consolidator.json"
    committed = path.read_text()
    assert committed == _generated("grafana", path, tmp_path), "deploy/grafana/consolidator.json is stale"
    dashboard = json.loads(committed)
    worker_panels = [p for p in PANELS if any(s.on_worker for s in (*p.left, *p.right))]
    assert [p["title"] for p in dashboard["panels"]] == [p.title for p in worker_panels]
    assert "Cleanup (per run)" not in [p["title"] for p in dashboard["panels"]]  # the worker runs no cleanup
    for drawn, panel in zip(dashboard["panels"], worker_panels, strict=True):
        series = [s for s in (*panel.left, *panel.right) if s.on_worker]
        assert [(t["expr"], t["legendFormat"]) for t in drawn["targets"]] == [(promql(s), s.label) for s in series]
    latency = next(p for p in dashboard["panels"] if p["title"].startswith("Event-to-publish latency"))
    assert all("histogram_quantile" in t["expr"] and "_bucket[" in t["expr"] for t in latency["targets"])
