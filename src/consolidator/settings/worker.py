"""The long-running worker's own settings (``consolidator worker``, docs/guide/worker.md): its process
(health and metrics port, shutdown bound) and its ingest side (write size, memory bound, commit
interval, how long a revoke or a shutdown waits for a write in flight)."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from consolidator.settings.base import Root, Seconds


class _WorkerProcess(Root):
    worker_http_port: int | None = Field(
        None, ge=1, le=65_535,
        description="serve /healthz, /readyz and /metrics (Prometheus) on this port, all interfaces; unset: no"
                    " HTTP server")
    worker_shutdown_seconds: Seconds = Field(
        25, le=3600, description="after SIGTERM or SIGINT the worker exits within this long (Kubernetes waits 30 s"
                                 " by default before SIGKILL); a second signal exits at once")


class _WorkerIngest(_WorkerProcess):
    worker_batch_records: int = Field(
        5000, ge=1, le=100_000,
        description="the most records one database write (one transaction) takes; the writer takes what has"
                    " arrived, up to this")
    worker_max_buffered_records: int = Field(
        50_000, ge=1, le=10_000_000,
        description="records fetched and not yet durable that the worker holds in memory; at this many it stops"
                    " fetching (it keeps polling, taking one record at most a poll) until a write makes room")
    worker_commit_interval_seconds: Seconds = Field(
        5, le=300, description="how often the offsets of records made durable are committed (also on every"
                               " revoke and at shutdown)")
    worker_write_wait_seconds: Seconds = Field(
        10, le=600, description="how long a revoke or a shutdown waits for a database write in flight before"
                                " abandoning it (its records are delivered again: replays)")

    @model_validator(mode="after")
    def _batch_fits_the_buffer(self) -> Self:
        if self.worker_batch_records > self.worker_max_buffered_records:
            raise ValueError(f"worker_batch_records ({self.worker_batch_records}) must be at most"
                             f" worker_max_buffered_records ({self.worker_max_buffered_records})")
        if self.worker_write_wait_seconds >= self.worker_shutdown_seconds:
            raise ValueError(f"worker_write_wait_seconds ({self.worker_write_wait_seconds:g}) must be less than"
                             f" worker_shutdown_seconds ({self.worker_shutdown_seconds:g}): the shutdown waits for"
                             " the write in flight, then commits and leaves the group")
        return self
