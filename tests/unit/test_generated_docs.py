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


def _printed(*args: str) -> str:
    result = runner.invoke(app, ["docs", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_metrics_reference_page_is_the_generated_one():
    committed = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    assert committed == _printed("metrics"), "docs/reference/metrics.md is stale: run `make docs`"
    for metric in METRICS:  # each metric once, with its names on both runtimes
        rows = [line for line in committed.splitlines() if f"`{prometheus_name(metric)}`" in line]
        assert len(rows) == 1 and (metric.source == "worker" or f"`{metric.name}` ({metric.unit})" in rows[0])


def test_the_grafana_dashboard_is_the_generated_one_and_draws_every_panel():
    committed = (ROOT / "deploy" / "grafana" / "consolidator.json").read_text()
    assert committed == _printed("grafana"), "deploy/grafana/consolidator.json is stale: run `make docs`"
    dashboard = json.loads(committed)
    worker_panels = [p for p in PANELS if any(s.on_worker for s in (*p.left, *p.right))]
    assert [p["title"] for p in dashboard["panels"]] == [p.title for p in worker_panels]
    assert "Cleanup (per run)" not in [p["title"] for p in dashboard["panels"]]  # the worker runs no cleanup
    for drawn, panel in zip(dashboard["panels"], worker_panels, strict=True):
        series = [s for s in (*panel.left, *panel.right) if s.on_worker]
        assert [(t["expr"], t["legendFormat"]) for t in drawn["targets"]] == [(promql(s), s.label) for s in series]
    latency = next(p for p in dashboard["panels"] if p["title"].startswith("Event-to-publish latency"))
    assert all("histogram_quantile" in t["expr"] and "_bucket[" in t["expr"] for t in latency["targets"])
