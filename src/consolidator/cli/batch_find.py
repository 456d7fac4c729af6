"""``consolidator batch find``: which batch carried an event, by its source position or its item id.

Exit codes: 0 a batch carried it (the batch's id, state and, once SENT, when it was published);
1 no batch carried it: still pending (in which group, since when), or no row holds it (the
message says what the partition's high-water mark tells); 2 usage or configuration error.
"""

from __future__ import annotations

import re
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
    store_for,
)
from consolidator.cli.batch import batch_app
from consolidator.rules.batch import iso_ms
from consolidator.rules.events import SourcePosition
from consolidator.rules.printable import echoed

_POSITION = re.compile(r"^(?P<topic>.+):(?P<partition>\d{1,10}):(?P<offset>\d{1,19})$")
MAX_ROWS = 1_000


def parse_position(value: object) -> SourcePosition:
    """``TOPIC:PARTITION:OFFSET`` (a Kafka topic name, two whole numbers), or a usage error."""
    from consolidator.sources.msk import TOPIC

    text = str(value)
    match = _POSITION.fullmatch(text)
    if match is None or not TOPIC.fullmatch(match["topic"]):
        raise typer.BadParameter(f"{echoed(text, 60)} is not a position: give TOPIC:PARTITION:OFFSET, e.g. orders:3:1042")
    partition, offset = int(match["partition"]), int(match["offset"])
    if partition >= 2**31 or offset >= 2**63:
        raise typer.BadParameter(f"{echoed(text, 60)}: partition or offset out of range")
    return SourcePosition(match["topic"], partition, offset)


def _row_document(row) -> dict:
    carried = bool(row.batch_id)
    return {
        "group_key": row.group_key, "item_id": row.item_id, "row_status": row.status,
        "newest_position": row.position.as_dict(), "merged_events": row.merged_events,
        "first_seen_ms": row.first_seen_ms, "last_update_ms": row.last_update_ms,
        "batch_id": row.batch_id or None, "batch_state": row.batch_state if carried else None,
        "claimed_at_ms": row.claimed_at_ms if carried else None,
        "published_at_ms": row.finished_at_ms if row.batch_state == "SENT" else None,
    }


def _row_line(d: dict) -> str:
    where = f"group {d['group_key']}, item {d['item_id']}"
    if d["batch_id"] is None:
        return (f"no batch carried it yet: still pending ({where}, first seen {iso_ms(d['first_seen_ms'])},"
                f" {d['merged_events']} event(s) merged)")
    state = d["batch_state"] or "its batch row was pruned"
    when = f", published {iso_ms(d['published_at_ms'])}" if d["published_at_ms"] is not None else ""
    return f"batch {d['batch_id']} ({state}{when}) carried it: {where}, row {d['row_status']}"


def _unheld_position(store, position: SourcePosition) -> str:
    """Why no row holds ``position``, from its partition's high-water mark."""
    marks = {p.partition: p.high_water for p in store.partition_offsets(position.topic)}
    high = marks.get(position.partition)
    if high is None:
        return f"no batch carried it: nothing of {position.topic}:{position.partition} was ingested here"
    if position.offset > high:
        return (f"no batch carried it: not ingested yet ({position.topic}:{position.partition} is ingested up to"
                f" offset {high})")
    return ("no batch carried it and no row holds it now: its partition is past it (offset "
            f"{high}), so a newer event of the same item replaced it (find that row with --item), it was poison"
            " (see the dead-letter destination), or its month's partition was dropped")


@batch_app.command("find", cls=reads("BatchViewSettings"))
@guarded
def find(
    position: Annotated[SourcePosition | None, typer.Option(
        parser=parse_position, metavar="TOPIC:PARTITION:OFFSET",
        help="The event's source position, e.g. orders:3:1042.")] = None,
    item: Annotated[str | None, typer.Option(help="The item id: every row of that item (any group and month).")] = None,
    limit: Annotated[int, typer.Option(parser=bounded(1, MAX_ROWS, integer=True),
                                       help="With --item: show at most this many rows (1 to 1,000).")] = 20,
    as_json: JsonOption = False,
) -> None:
    """Which batch carried this event: by --position (the row whose newest event is there) or by
    --item (the item's rows, newest event first): the batch id, its state and when it was
    published; or that no batch carried it (still pending, or no row holds it). Scans the buffer
    (neither is indexed). Exit 0: a batch carried it; 1: none did; 2: usage."""
    if (position is None) == (item is None):
        raise typer.BadParameter("give exactly one of --position TOPIC:PARTITION:OFFSET and --item ID")
    store = store_for(load_settings("BatchViewSettings"))
    rows = store.rows_at_position(position) if position is not None else store.rows_of_item(item, limit)
    documents = [_row_document(r) for r in rows]
    carried = any(d["batch_id"] for d in documents)
    if rows:
        answer, message = ("batch" if carried else "pending"), None
    else:
        answer = "not_found"
        message = (_unheld_position(store, position) if position is not None
                   else f"no batch carried it: no row of item {item} (never ingested, or its month was dropped)")
    if as_json:
        emit_json({"answer": answer, "rows": documents, "message": message,
                   "position": None if position is None else position.as_dict(), "item_id": item})
    elif message is not None:
        out.print(message, soft_wrap=True)
    elif len(documents) == 1:
        out.print(_row_line(documents[0]), soft_wrap=True)
    else:
        table = Table(title=f"rows of item {item} ({len(documents)}, newest event first)")
        for column in ("group", "row", "newest position", "batch", "state", "published"):
            table.add_column(column)
        for d in documents:
            p = d["newest_position"]
            table.add_row(d["group_key"], d["row_status"], f"{p['topic']}:{p['partition']}:{p['offset']}",
                          d["batch_id"] or "- (pending)", d["batch_state"] or "-",
                          "-" if d["published_at_ms"] is None else iso_ms(d["published_at_ms"]))
        out.print(table)
    if not carried:
        raise typer.Exit(EXIT_FAILED)
