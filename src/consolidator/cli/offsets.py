"""``consolidator offsets``: the per-partition high-water marks that make replays no-ops."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from consolidator.cli.base import (
    EXIT_FAILED,
    JsonOption,
    bounded,
    emit_json,
    guarded,
    load_settings,
    out,
    reads,
    say_error,
    store_for,
    topic_name,
)
from consolidator.cli.render import confirm

offsets_app = typer.Typer(help="Replay protection: one high-water offset per (topic, partition).",
                          no_args_is_help=True)


def _rows(offsets) -> list[dict]:
    return [{"topic": o.topic, "partition": o.partition, "high_water": o.high_water} for o in offsets]


@offsets_app.command("list", cls=reads("CleanupSettings"))
@guarded
def offsets_list(
    topic: Annotated[str | None, typer.Option(parser=topic_name, help="Only this topic.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Each partition's high-water offset: a record at or below it is a replay (a no-op)."""
    rows = _rows(store_for(load_settings("CleanupSettings")).partition_offsets(topic))
    if as_json:
        emit_json({"offsets": rows})
        return
    table = Table(title="replay high-water marks")
    for column in ("topic", "partition", "high water"):
        table.add_column(column)
    for r in rows:
        table.add_row(r["topic"], str(r["partition"]), str(r["high_water"]))
    out.print(table)


@offsets_app.command("reset", cls=reads("CleanupSettings"))
@guarded
def offsets_reset(
    topic: Annotated[str, typer.Argument(parser=topic_name, help="The topic whose replay state is forgotten.")],
    partition: Annotated[int | None, typer.Option(parser=bounded(0, 2**31 - 1, integer=True),
                                                  help="Only this partition (0 or more).")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Forget the replay state of TOPIC (after the topic was deleted and recreated, so its
    offsets start again at 0) and move its epoch, so its new batches get ids no old batch has.
    Every record of it is then applied again when delivered: on a topic that was NOT recreated
    this re-applies records already stored."""
    store = store_for(load_settings("CleanupSettings"))
    marks = [o for o in store.partition_offsets(topic) if partition is None or o.partition == partition]
    if not marks:
        say_error("nothing to reset", f"no high-water mark for topic {topic!r}"
                  + ("" if partition is None else f" partition {partition}"))
        raise typer.Exit(EXIT_FAILED)
    if not yes:
        highest = max(o.high_water for o in marks)
        confirm(f"Forget {len(marks)} high-water mark(s) of topic {topic!r} (highest offset {highest})?"
                " Records of it will be applied again when delivered")
    deleted, positions = store.reset_offsets(topic, partition)
    epoch = store.topic_epochs().get(topic, 0)
    if as_json:
        emit_json({"topic": topic, "partition": partition, "marks_deleted": deleted,
                   "applied_positions_deleted": positions, "epoch": epoch, "before": _rows(marks)})
    else:
        out.print(f"forgot {deleted} high-water mark(s) and {positions} applied position(s) of {topic!r};"
                  f" its epoch is now {epoch}: batches claimed from now on get new ids")
