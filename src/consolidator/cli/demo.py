"""``consolidator demo``: the local end-to-end run."""

from __future__ import annotations

from typing import Annotated

import typer

from consolidator.cli.base import (
    EXIT_FAILED,
    EXIT_USAGE,
    JsonOption,
    app,
    bounded,
    emit_json,
    err,
    out,
    say_error,
)
from consolidator.rules.errors import ConfigurationError, ConsolidatorError


def _url(check: str):
    """The callback that checks a URL option as the settings check the variable of the same kind."""

    def callback(value: str | None) -> str | None:
        from consolidator import settings

        if value is not None:
            try:
                getattr(settings, check)(value)
            except ValueError as exc:
                raise typer.BadParameter(f"{exc} (got {settings.mask(value)})") from None
        return value

    return callback


@app.command()
def demo(
    warehouses: Annotated[int, typer.Option(parser=bounded(1, 10_000, integer=True),
                                            help="Distinct group keys (1 to 10,000).")] = 20,
    orders: Annotated[int, typer.Option(parser=bounded(1, 1_000_000, integer=True),
                                        help="Distinct orders produced (1 to 1,000,000).")] = 3000,
    poison: Annotated[int, typer.Option(parser=bounded(0, 10_000, integer=True),
                                        help="Poison messages mixed in (0 to 10,000).")] = 5,
    seed: Annotated[int, typer.Option(parser=bounded(0, 2**63 - 1, integer=True),
                                      help="Random seed of the synthetic topic (0 or more).")] = 7,
    bursts: Annotated[int, typer.Option(parser=bounded(1, 1_000, integer=True),
                                        help="Bursts the orders arrive in, pauses between (1 to 1,000).")] = 8,
    database_url: Annotated[str | None, typer.Option(
        callback=_url("check_database_server_url"), help="Database server for the demo database (default mysql://root@127.0.0.1:3306; "
             "CONSOLIDATOR_DATABASE_URL is never used unless passed here).")] = None,
    database_name: Annotated[str, typer.Option(
        help="Demo database: created by the demo and recreated on every run; a database the demo "
             "did not create (or a system schema) is refused, exit 2.")] = "consolidator_demo",
    redis_url: Annotated[str, typer.Option(
        callback=_url("check_redis_url"), help="Redis for the flush lock (CONSOLIDATOR_REDIS_URL is never used unless passed here).")
                         ] = "redis://127.0.0.1:6379/0",
    verbose: Annotated[bool, typer.Option("--verbose", help="The functions' logs at WARNING, on stderr.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Run the whole product locally and check that nothing was lost or duplicated.

    Mock Kafka in, the real ingest and flush handlers, batches out to a Kafka topic and read
    back; prints one batch and keeps every batch in a file (it says where). With --json,
    stdout holds exactly one JSON document (the summary, with sample_batch and batches_file);
    progress and logs go to stderr. Needs MariaDB or MySQL and Redis (the options say where),
    no CONSOLIDATOR_* variable. Exit 0 only when the invariant check passes."""
    from consolidator.demo import DemoConfig, run_demo

    config = DemoConfig(warehouses=warehouses, orders=orders, poison=poison, seed=seed, bursts=bursts,
                        database_url=database_url, database_name=database_name, redis_url=redis_url,
                        verbose=verbose)
    try:
        result = run_demo(config, console=err if as_json else out)
    except ConfigurationError as exc:
        say_error("configuration error", exc)
        raise typer.Exit(EXIT_USAGE) from None
    except ConsolidatorError as exc:
        say_error("demo failed", exc)
        raise typer.Exit(EXIT_FAILED) from None
    if as_json:
        emit_json(result.summary)
    if not result.passed:
        raise typer.Exit(EXIT_FAILED)
