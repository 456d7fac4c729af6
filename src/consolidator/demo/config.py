"""The demo's settings, result and error."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from consolidator.demo.check import CheckResult
from consolidator.rules.errors import ConsolidatorError

INPUT_TOPIC = "orders"
OUTPUT_TOPIC = "consolidated-batches"
DEMO_DATABASE = "consolidator_demo"


class DemoError(ConsolidatorError):
    """The demo could not run (missing checkout, services down, timeout)."""


@dataclass
class DemoConfig:
    warehouses: int = 20
    orders: int = 3000
    poison: int = 5
    seed: int = 7
    bursts: int = 8
    burst_gap_s: tuple[float, float] = (0.3, 2.5)  # pause between bursts (some longer than debounce)
    database_url: str | None = None  # server to use (its database part is ignored); None: local
    database_name: str = DEMO_DATABASE  # created by the demo; a database it did not create is refused
    redis_url: str = "redis://127.0.0.1:6379/0"
    debounce_s: float = 2.0
    hard_window_s: float = 6.0
    max_batch_size: int = 100
    tick_interval_s: float = 1.0
    flush_invocation_s: float = 5.0  # one scheduled flush invocation's timeout
    esm_batch_size: int = 300
    esm_batch_window_s: float = 0.25
    redeliver_every: int = 7  # every Nth ingest invocation is delivered twice
    dead_letter_outage: bool = True
    timeout_s: float = 150.0
    repo_root: Path | None = None
    verbose: bool = False


@dataclass
class DemoResult:
    check: CheckResult
    summary: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.check.passed
