"""The worker's metrics in Prometheus' text format (version 0.0.4), fed by the same
``add_metric`` calls the services make for CloudWatch, so the names are the catalogue's
(:data:`consolidator.services.metrics.METRICS`) under Prometheus' conventions.

Thread-safe: the writer, the flush loop and the poll loop record; the HTTP server renders.
"""

from __future__ import annotations

import logging
import math
import threading

from consolidator.services.metrics import BY_NAME, METRICS, Metric, base_value, prometheus_name

log = logging.getLogger(__name__)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Labels = tuple[tuple[str, str], ...]


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return str(int(value)) if float(value).is_integer() and abs(value) < 2**53 else repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(labels: Labels) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}" if labels else ""


class PrometheusRegistry:
    """A :class:`~consolidator.services.metrics.MetricsRecorder` that keeps, per catalogue
    metric and label set, a counter's sum, a gauge's last value, a summary's count and sum, or
    a histogram's count, sum and cumulative count per bucket."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[Labels, list[float]]] = {}
        self._unknown: set[str] = set()

    def add_metric(self, name: str, unit: str, value: float) -> None:
        """What a service records (EMF name and unit): counted, set or observed per its kind."""
        metric = BY_NAME.get(name)
        if metric is None:
            if name not in self._unknown:
                self._unknown.add(name)
                log.warning("metric not in the catalogue; not exported", extra={"metric": name, "unit": unit})
            return
        self.record(metric, value)

    def record(self, metric: Metric, value: float, labels: Labels = ()) -> None:
        value = base_value(metric, value)
        with self._lock:
            series = self._values.setdefault(metric.name, {})
            current = series.get(labels)
            if metric.kind == "histogram":  # sum, count, then the count of each bucket
                if current is None:
                    current = series[labels] = [0.0] * (2 + len(metric.buckets))
                current[0] += value
                current[1] += 1
                for index, bound in enumerate(metric.buckets):
                    if value <= bound:
                        current[2 + index] += 1
            elif metric.kind == "gauge" or current is None:
                series[labels] = [value, 1.0] if metric.kind == "summary" else [value]
            elif metric.kind == "counter":
                current[0] += value
            else:
                current[0] += value
                current[1] += 1

    def set(self, name: str, value: float, labels: Labels = ()) -> None:
        """Set a gauge (by its catalogue name) for one label set."""
        self.record(BY_NAME[name], value, labels)

    def forget(self, name: str, labels: Labels) -> None:
        """Drop one label set of a metric (a partition no longer owned)."""
        with self._lock:
            self._values.get(name, {}).pop(labels, None)

    def value(self, name: str, labels: Labels = ()) -> float | None:
        """The current value (a summary's sum) of one series, or None (tests, health)."""
        with self._lock:
            found = self._values.get(name, {}).get(labels)
            return None if found is None else found[0]

    def render(self) -> str:
        """Every metric recorded so far, in catalogue order; counters, gauges, summaries (count
        and sum) and histograms (buckets, count and sum) with their HELP and TYPE lines."""
        lines: list[str] = []
        with self._lock:
            for metric in METRICS:
                series = self._values.get(metric.name)
                if not series:
                    continue
                name = prometheus_name(metric)
                lines.append(f"# HELP {name} {_help(metric.help)}")
                lines.append(f"# TYPE {name} {metric.kind}")
                for labels, value in sorted(series.items()):
                    if metric.kind == "histogram":
                        for bound, hits in zip((*metric.buckets, math.inf), (*value[2:], value[1]), strict=True):
                            le = _labels((*labels, ("le", _number(bound))))
                            lines.append(f"{name}_bucket{le} {_number(hits)}")
                    if metric.kind in ("summary", "histogram"):
                        lines.append(f"{name}_sum{_labels(labels)} {_number(value[0])}")
                        lines.append(f"{name}_count{_labels(labels)} {_number(value[1])}")
                    else:
                        lines.append(f"{name}{_labels(labels)} {_number(value[0])}")
        return "\n".join(lines) + "\n"


def partition_labels(topic: str, partition: int) -> Labels:
    return (("topic", topic), ("partition", str(partition)))
