"""``consolidator limits``: per-group rate limit overrides, stored in the database.

An override wins over the default (``CONSOLIDATOR_RATE_LIMIT_BATCHES`` per
``CONSOLIDATOR_RATE_LIMIT_PERIOD_SECONDS``) and takes effect at the flusher's next tick.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from consolidator.cli.base import (
    EXIT_FAILED,
    JsonOption,
    as_setting,
    bounded,
    emit_json,
    guarded,
    load_settings,
    out,
    reads,
    store_for,
    wall_clock_ms,
)
from consolidator.rules.events import MAX_KEY_CHARS
from consolidator.rules.policy import MAX_RATE_BATCHES, RateLimit

limits_app = typer.Typer(help="Per-group rate limit overrides (at most N batches per period).",
                         no_args_is_help=True)


def _row(group_key: str, limit: RateLimit) -> dict:
    return {"group_key": group_key, "batches": limit.batches, "period_s": limit.period_ms / 1000}


def _group_key(value: str) -> str:
    """A group key as the buffer stores it: 1 to MAX_KEY_CHARS characters."""
    if not 1 <= len(value) <= MAX_KEY_CHARS:
        raise typer.BadParameter(f"a group key of {len(value)} characters is out of range:"
                                 f" allowed 1 to {MAX_KEY_CHARS} characters")
    return value


@limits_app.command("set", cls=reads("CleanupSettings"))
@guarded
def set_limit(
    group_key: Annotated[str, typer.Argument(help=f"The group key, exactly as in the events (1 to {MAX_KEY_CHARS}"
                                                  " characters).", callback=_group_key)],
    batches: Annotated[int, typer.Option("--batches", parser=bounded(1, MAX_RATE_BATCHES, integer=True),
                                         help=f"At most this many batches (1 to {MAX_RATE_BATCHES:,}) ...")],
    per: Annotated[float, typer.Option("--per", parser=as_setting("rate_limit_period_seconds"), help="... in any window of this many seconds "
                                       "(the bounds of CONSOLIDATOR_RATE_LIMIT_PERIOD_SECONDS).")],
    as_json: JsonOption = False,
) -> None:
    """Limit one group to BATCHES batches per PER seconds (replaces its previous override)."""
    limit = RateLimit(batches, round(per * 1000))
    store = store_for(load_settings("CleanupSettings"))
    store.set_limit(group_key, limit, wall_clock_ms())
    if as_json:
        emit_json({"set": _row(group_key, limit)})
    else:
        out.print(f"{group_key}: at most {batches} batches per {per:g} s", highlight=False)


@limits_app.command("list", cls=reads("LimitSettings"))
@guarded
def list_limits(as_json: JsonOption = False) -> None:
    """The per-group overrides and the default limit of this environment."""
    s = load_settings("LimitSettings")
    default = s.rate_limit()
    overrides = [_row(g, limit) for g, limit in store_for(s).limits().items()]
    if as_json:
        emit_json({"default": None if default is None else {"batches": default.batches,
                                                              "period_s": default.period_ms / 1000},
                   "overrides": overrides})
        return
    out.print("default: " + ("none (groups without an override are not limited)" if default is None
                             else f"{default.batches} batches per {default.period_ms / 1000:g} s"), highlight=False)
    table = Table(title=f"overrides ({len(overrides)})")
    for column in ("group", "batches", "per (s)"):
        table.add_column(column)
    for row in overrides:
        table.add_row(row["group_key"], str(row["batches"]), f"{row['period_s']:g}")
    out.print(table)


@limits_app.command("clear", cls=reads("CleanupSettings"))
@guarded
def clear_limit(
    group_key: Annotated[str, typer.Argument(help="The group whose override goes.")],
    as_json: JsonOption = False,
) -> None:
    """Remove one group's override (it falls back to the default). Exit 1 when it had none."""
    cleared = store_for(load_settings("CleanupSettings")).clear_limit(group_key)
    if as_json:
        emit_json({"cleared": cleared, "group_key": group_key})
    else:
        out.print(f"{group_key}: " + ("override removed" if cleared else "had no override"), highlight=False)
    if not cleared:
        raise typer.Exit(EXIT_FAILED)
