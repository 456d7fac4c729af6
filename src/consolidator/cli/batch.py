"""``consolidator batch``: completion tracking of one batch, operator acks, overdue batches."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from consolidator.cli.base import (
    EXIT_FAILED,
    MAX_LIST,
    JsonOption,
    age_text,
    bounded,
    check_batch_ids,
    emit_json,
    fail,
    guarded,
    load_settings,
    out,
    reads,
    say_error,
    store_for,
    wall_clock_ms,
)

batch_app = typer.Typer(help="Batch completion tracking: status, acks, overdue batches.", no_args_is_help=True)


def _status(store, batch_id: str, now: int) -> dict | None:
    tracker = store.tracker(batch_id)
    if tracker is None:
        return None
    return {
        "batch_id": batch_id,
        "group_key": tracker.group_key,
        "state": store.batch_state(batch_id),  # CLAIMED | SENT | DEAD, None: built by Spark or cleaned up
        "members": tracker.member_count,
        "acknowledged": tracker.acked_count,
        "complete": tracker.complete,
        "completion": tracker.outbox.lower(),  # none | pending | published
        "age_s": round((now - tracker.sealed_at_ms) / 1000, 3),
        "sealed_at_ms": tracker.sealed_at_ms,
        "completed_at_ms": tracker.completed_at_ms,
    }


@batch_app.command("status", cls=reads("CleanupSettings"))
@guarded
def status(batch_id: Annotated[str, typer.Argument(help="The batch id (32 hex characters).")],
           as_json: JsonOption = False) -> None:
    """State, members, acknowledged members, complete or not, and age of one tracked batch."""
    check_batch_ids([batch_id], as_json)
    store = store_for(load_settings("CleanupSettings"))
    document = _status(store, batch_id, wall_clock_ms())
    if document is None:
        raise fail(f"unknown batch {batch_id}: not tracked (tracking off, never sealed, or cleaned up)", as_json,
                   batch_id=batch_id)
    if as_json:
        emit_json(document)
        return
    out.print(f"batch {batch_id} ({document['group_key']}): {document['state'] or 'built elsewhere'}, "
              f"{document['acknowledged']}/{document['members']} members acknowledged, "
              f"{'complete' if document['complete'] else 'not complete'} "
              f"(completion {document['completion']}), sealed {document['age_s']:.0f}s ago")


@batch_app.command("ack", cls=reads("AckSettings"))
@guarded
def ack(
    batch_id: Annotated[str, typer.Argument(help="The batch id (32 hex characters).")],
    item: Annotated[list[str] | None, typer.Option("--item", help="Item id to acknowledge (repeatable).")] = None,
    index: Annotated[list[int] | None, typer.Option("--index", help="Member index to acknowledge (repeatable).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Acknowledge members by item id or index, as a consumer would; publishes the completion
    when this was the last member. Exit 1 when anything was refused."""
    from consolidator.completion import Ack, AckFormatError
    from consolidator.services.acks import build_ack_service

    check_batch_ids([batch_id], as_json)
    try:
        request = Ack(batch_id, tuple(index or ()), tuple(item or ()))
    except AckFormatError as error:
        raise fail(f"bad ack: {error}", as_json, batch_id=batch_id) from None
    service = build_ack_service(load_settings("AckSettings"))
    (result,) = service.ack([request])
    document = {
        "batch_id": batch_id, "newly_acknowledged": result.newly_acked, "duplicates": result.duplicates,
        "refused": [{"member": m, "reason": r} for m, r in result.refused],
        "completed_now": result.completed is not None,
    }
    if as_json:
        emit_json(document)
    else:
        out.print(f"acknowledged {result.newly_acked} new, {result.duplicates} already acknowledged"
                  + ("; batch complete, completion published" if result.completed else ""))
        for member, reason in result.refused:
            say_error("refused", f"{reason}" + ("" if member is None else f": {member}"))
    if result.refused:
        raise typer.Exit(EXIT_FAILED)


@batch_app.command("list", cls=reads("CompletionSettings"))
@guarded
def list_(
    incomplete: Annotated[bool, typer.Option("--incomplete", help="Sent batches not complete after the deadline.")] = False,
    limit: Annotated[int, typer.Option(parser=bounded(0, MAX_LIST, integer=True), help="Show at most this many batches (0 to 100,000).")] = 100,
    as_json: JsonOption = False,
) -> None:
    """Tracked batches that are overdue: sent, not complete after CONSOLIDATOR_COMPLETION_DEADLINE_SECONDS
    (default 3600), oldest first."""
    if not incomplete:
        say_error("usage", "only --incomplete is supported")
        raise typer.Exit(2)
    s = load_settings("CompletionSettings")
    deadline_ms = round(s.completion_deadline_seconds * 1000)
    store = store_for(s)
    now = wall_clock_ms()
    trackers = store.incomplete_trackers(now - deadline_ms, limit)
    document = {"now_ms": now, "deadline_ms": deadline_ms, "batches": [
        {"batch_id": t.batch_id, "group_key": t.group_key, "members": t.member_count,
         "acknowledged": t.acked_count, "age_s": round((now - t.sealed_at_ms) / 1000, 3),
         "last_ack_ms": t.last_ack_ms}
        for t in trackers
    ]}
    if as_json:
        emit_json(document)
        return
    table = Table(title=f"incomplete batches past the deadline ({len(trackers)}, oldest first)")
    for column in ("batch id", "group", "acknowledged", "age", "last ack"):
        table.add_column(column)
    for t in trackers:
        table.add_row(t.batch_id, t.group_key, f"{t.acked_count}/{t.member_count}", age_text(now, t.sealed_at_ms),
                      age_text(now, t.last_ack_ms) + (" ago" if t.last_ack_ms else ""))
    out.print(table)
