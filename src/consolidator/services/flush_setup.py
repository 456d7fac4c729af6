"""Wiring of the flush service from its settings (the handler's and the CLI's entry point)."""

from __future__ import annotations

import dataclasses

from consolidator.rules.clock import Clock
from consolidator.rules.errors import ConfigurationError
from consolidator.services.flush import FlushService
from consolidator.services.metrics import MetricsRecorder, NoMetrics
from consolidator.sinks import Sink
from consolidator.store.lock import RedisLock


def batch_bytes_cap(configured: int | None, sink: Sink) -> int:
    """CONSOLIDATOR_MAX_BATCH_BYTES, or the sink's per-message limit when unset; a cap above
    that limit would only make batches the sink must refuse, so it is a configuration error.
    Either is counted as the sink counts a body (``sink.measure_body``, the policy's too)."""
    if configured is None:
        return sink.max_message_bytes
    if configured > sink.max_message_bytes:
        raise ConfigurationError(
            f"invalid configuration: CONSOLIDATOR_MAX_BATCH_BYTES ({configured}) is over the sink's "
            f"per-message limit ({sink.max_message_bytes} bytes); lower it or leave it unset")
    return configured


def check_batch_cap(configured: int | None, sink_url: str) -> None:
    """Raise :class:`ConfigurationError` when ``configured`` is over the per-message limit of the
    sink at ``sink_url`` (:func:`batch_bytes_cap`); the sink is built, used for nothing, closed."""
    from consolidator.sinks import sink_from_url

    sink = sink_from_url(sink_url)
    try:
        batch_bytes_cap(configured, sink)
    finally:
        sink.close()


def build_flush_service(settings, metrics: MetricsRecorder | None = None, clock: Clock | None = None) -> FlushService:
    """Wire the service from :class:`~consolidator.settings.FlushSettings`."""
    from consolidator.rules.clock import SystemClock
    from consolidator.sinks import sink_from_url
    from consolidator.sinks.deadletter import dead_letter_from_url
    from consolidator.store import open_store
    from consolidator.support.aws_secrets import secret_string

    sink = sink_from_url(settings.sink_url, timeout_s=settings.sink_timeout_seconds)
    return FlushService(
        store=open_store(settings.database_url, settings.database_secret_arn),
        sink=sink,
        dead_letter=dead_letter_from_url(settings.dead_letter_url),
        policy=dataclasses.replace(settings.policy(), max_batch_bytes=batch_bytes_cap(settings.max_batch_bytes, sink),
                                   measure_body=sink.measure_body),
        clock=clock or SystemClock(),
        names=settings.field_names(),
        max_attempts=settings.max_attempts,
        max_rows_per_tick=settings.max_rows_per_tick,
        metrics=metrics or NoMetrics(),
        lock=RedisLock.from_url(settings.redis_url, ttl_ms=round(settings.lock_ttl_seconds * 1000),
                                key=settings.lock_key,
                                password=secret_string(arn) if (arn := settings.redis_auth_secret_arn) else None),
        completion_tracking=settings.completion_tracking,
    )

