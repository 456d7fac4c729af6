"""The metrics port of the services: what they record, not how (the Lambda handlers pass
Powertools' ``Metrics``; the CLI, tests and Spark pass nothing and get :class:`NoMetrics`)."""

from __future__ import annotations

from typing import Protocol


class MetricsRecorder(Protocol):
    """What Powertools' ``Metrics`` offers; services depend on this, not on Powertools."""

    def add_metric(self, name: str, unit: str, value: float) -> None: ...


class NoMetrics:
    """Records nothing."""

    def add_metric(self, name: str, unit: str, value: float) -> None:
        pass
