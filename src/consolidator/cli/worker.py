"""``consolidator worker``: the long-running consumer service (docs/guide/worker.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from consolidator.cli.base import EXIT_FAILED, app, guarded, load_settings, reads

MODELS = {"all": "WorkerSettings", "ingest": "WorkerIngestSettings", "flush": "WorkerFlushSettings"}


def _role(value: str) -> str:
    if value not in MODELS:
        raise typer.BadParameter(f"one of {', '.join(MODELS)}; got {value!r}")
    return value


def _json_logs():
    """The functions' JSON log lines (Powertools, ``configure_function_logging``) on stdout, under
    the service ``consolidator-worker``; the level from ``POWERTOOLS_LOG_LEVEL`` (default INFO)."""
    import logging

    from aws_lambda_powertools import Logger

    from consolidator.support.function_logging import configure_function_logging

    logging.getLogger("consolidator")  # the parent of every project logger, also of those created later
    logger = Logger(service="consolidator-worker")
    configure_function_logging(logger)
    return logger


@app.command(cls=reads({"--role all": MODELS["all"], "--role ingest": MODELS["ingest"],
                        "--role flush": MODELS["flush"]}))
@guarded
def worker(
    role: Annotated[str, typer.Option(
        "--role", callback=_role,
        help="all: consume and flush; ingest: only consume Kafka into the buffer; flush: only run the flush"
             " ticks (for fleets that split them).")] = "all",
) -> None:
    """Run the long-running worker: consume the source topics in a consumer group into the buffer
    (the ingest function's rules), and flush due groups on the tick schedule under the Redis lock
    (the flush function's). Logs JSON lines on stdout. SIGTERM or SIGINT stops it cleanly within
    CONSOLIDATOR_WORKER_SHUTDOWN_SECONDS (exit 0; at once while it starts); a second signal exits at
    once. Exit 1 when a part of it failed, 2 on a configuration error."""
    from consolidator.worker import runtime, signals

    settings = load_settings(MODELS[role])
    _json_logs()
    signals.exit_while_starting()
    running = runtime.build_worker(settings, role)
    signals.install(running.request_stop)
    code = running.run()
    if code:
        raise typer.Exit(EXIT_FAILED)
