"""The one list of dashboard panels over the product metrics (:data:`PANELS`), read by both
dashboards: the CloudWatch dashboard the CDK builds (``infra/consolidator_infra/monitoring.py``,
on the functions' EMF metrics) and the Grafana dashboard of the worker's Prometheus metrics
(:func:`grafana_dashboard`, committed as ``deploy/grafana/consolidator.json``;
``consolidator docs grafana`` writes it).

A series names a metric of :data:`~consolidator.services.metrics.METRICS` and a statistic each
runtime computes alike: ``sum`` (a counter's increase per minute), ``max`` and ``avg`` (a
gauge's), ``avg`` of a summary or histogram (sum over count), ``p50``/``p90``/``p99`` (a
histogram's quantiles). Time is shown in seconds on both. Each dashboard draws the series of
the metrics its runtime records (:attr:`Series.on_functions`, :attr:`Series.on_worker`); a panel
left empty is not drawn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from consolidator.services.metrics import BY_NAME, Metric, prometheus_name

Stat = Literal["sum", "max", "avg", "p50", "p90", "p99"]
QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
CLOUDWATCH_STATS = {"sum": "Sum", "max": "Maximum", "avg": "Average", "p50": "p50", "p90": "p90", "p99": "p99"}
_ALLOWED = {"counter": {"sum"}, "gauge": {"max", "avg"}, "summary": {"avg"}, "histogram": {"avg", *QUANTILES}}


@dataclass(frozen=True)
class Series:
    metric: str  # a name of METRICS
    stat: Stat
    label: str

    def __post_init__(self) -> None:
        kind = BY_NAME[self.metric].kind
        if self.stat not in _ALLOWED[kind]:
            raise ValueError(f"{self.metric} is a {kind}: its statistics are {sorted(_ALLOWED[kind])}, not {self.stat}")

    @property
    def definition(self) -> Metric:
        return BY_NAME[self.metric]

    @property
    def on_functions(self) -> bool:
        """Recorded by the Lambda functions (EMF, the CloudWatch dashboard)."""
        return self.definition.source != "worker"

    @property
    def on_worker(self) -> bool:
        """Recorded by the worker (Prometheus, the Grafana dashboard): ingest, flush and its own."""
        return self.definition.source in ("ingest", "flush", "worker")


@dataclass(frozen=True)
class Panel:
    title: str
    left: tuple[Series, ...]
    right: tuple[Series, ...] = ()
    left_label: str = ""
    right_label: str = ""


def _s(metric: str, stat: Stat, label: str) -> Series:
    return Series(metric, stat, label)


PANELS: tuple[Panel, ...] = (
    Panel("Ingest (records per minute)",
          (_s("RecordsIngested", "sum", "stored"), _s("RecordsCoalesced", "sum", "coalesced"),
           _s("RecordsReplayed", "sum", "replayed (no-op)")),
          (_s("RecordsDeadLettered", "sum", "dead-lettered"), _s("RecordsFailed", "sum", "failed (retried)")),
          "records", "records"),
    Panel("Batches per minute by reason",
          (_s("BatchesFlushedIdle", "sum", "idle"), _s("BatchesFlushedHardWindow", "sum", "hard window"),
           _s("BatchesFlushedFull", "sum", "full")),
          (_s("BatchesFlushed", "sum", "all batches"),), "batches", "batches"),
    Panel("Batch size (members)", (_s("BatchSize", "avg", "average"),), (), "members"),
    Panel("Event-to-publish latency (seconds)",
          (_s("EventToPublishLatency", "p50", "median (s)"), _s("EventToPublishLatency", "p90", "p90 (s)"),
           _s("EventToPublishLatency", "p99", "p99 (s)")), (), "seconds"),
    Panel("Oldest PENDING event (seconds)", (_s("OldestPendingAge", "max", "oldest pending (s)"),),
          (_s("TicksSkipped", "sum", "ticks skipped"), _s("PublishFailures", "sum", "publish failures"),
           _s("DeadBatches", "sum", "dead batches")), "seconds", "count"),
    Panel("Cleanup (per run)",
          (_s("PartitionsCreated", "sum", "partitions created"), _s("PartitionsDropped", "sum", "partitions dropped"),
           _s("PartitionDropsRefused", "sum", "drops refused")), (), "partitions"),
    Panel("Worker: consumption",
          (_s("PartitionLag", "max", "largest partition lag (records)"), _s("BufferedRecords", "max", "buffered records")),
          (_s("WorkerWriteFailures", "sum", "write failures"), _s("OffsetCommitFailures", "sum", "commit failures")),
          "records", "count"),
)


def promql(series: Series) -> str:
    """The Prometheus query of ``series`` (per minute for counters, seconds for time)."""
    metric = series.definition
    name = prometheus_name(metric)
    if series.stat == "sum":
        return f"sum(increase({name}[1m]))"
    if series.stat in QUANTILES:
        return f"histogram_quantile({QUANTILES[series.stat]}, sum by (le) (rate({name}_bucket[5m])))"
    if metric.kind in ("summary", "histogram"):
        return f"sum(rate({name}_sum[5m])) / sum(rate({name}_count[5m]))"
    return f"{series.stat}({name})"


def grafana_dashboard() -> dict:
    """The Grafana dashboard (JSON model) of :data:`PANELS` on a Prometheus data source chosen
    when it is imported (``${datasource}``)."""
    source = {"type": "prometheus", "uid": "${datasource}"}
    panels = []
    for panel in PANELS:
        drawn = [("left", s) for s in panel.left if s.on_worker] + [("right", s) for s in panel.right if s.on_worker]
        if not drawn:
            continue
        index = len(panels)
        targets, overrides = [], []
        for ref, (axis, series) in enumerate(drawn):
            refid = chr(ord("A") + ref)
            targets.append({"datasource": source, "expr": promql(series), "legendFormat": series.label, "refId": refid})
            if axis == "right":
                overrides.append({"matcher": {"id": "byFrameRefID", "options": refid},
                                  "properties": [{"id": "custom.axisPlacement", "value": "right"},
                                                 {"id": "custom.axisLabel", "value": panel.right_label}]})
        panels.append({
            "id": index + 1, "type": "timeseries", "title": panel.title, "datasource": source,
            "gridPos": {"h": 8, "w": 8, "x": 8 * (index % 3), "y": 8 * (index // 3)},
            "fieldConfig": {"defaults": {"custom": {"axisLabel": panel.left_label}}, "overrides": overrides},
            "targets": targets,
        })
    return {
        "title": "Consolidator worker", "uid": "consolidator-worker", "schemaVersion": 39, "editable": True,
        "time": {"from": "now-6h", "to": "now"}, "refresh": "1m", "tags": ["consolidator"],
        "templating": {"list": [{"name": "datasource", "label": "Prometheus", "type": "datasource",
                                 "query": "prometheus"}]},
        "panels": panels,
    }


def grafana_json() -> str:
    """:func:`grafana_dashboard` as the committed file's text (sorted keys, two-space indent)."""
    return json.dumps(grafana_dashboard(), indent=2, sort_keys=True) + "\n"
