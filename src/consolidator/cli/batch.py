"""``consolidator batch``: any batch and its members (``show``, ``list``), completion tracking of
one batch, operator acks, overdue batches."""

from __future__ import annotations

import json
import re
from datetime import datetime
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

batch_app = typer.Typer(help="Batches: show one, list them, completion tracking (status, acks, overdue).",
                        no_args_is_help=True)
_AGO = re.compile(r"^(\d+)([smhd])$")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _since_ms(text: str, now_ms: int) -> int:
    """``30m``, ``2h``, ``1d`` (ago) or an ISO-8601 time with its offset."""
    if match := _AGO.match(text):
        return now_ms - int(match[1]) * _UNIT_MS[match[2]]
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r}: give 30m, 2h, 1d or an ISO time like 2026-11-26T15:00:00Z") from None
    if moment.tzinfo is None:
        raise typer.BadParameter(f"{text!r}: an ISO time needs its offset (Z or +01:00)")
    return round(moment.timestamp() * 1000)


def _member_document(m) -> dict:
    document = {**m.position.as_dict(), "item_id": m.item_id, "merged_events": m.merged_events,
                "first_seen_ms": m.first_seen_ms, "last_update_ms": m.last_update_ms}
    if m.event is not None:
        document["event"] = m.event
    if m.items is not None:
        document["items"] = [{"sku": sku, "quantity": quantity} for sku, quantity in m.items]
    return document


def _aggregates(view, shape) -> tuple[dict | None, str | None]:
    """The batch's aggregates as its message computes them from its rows (``{"items": [...]}``
    for the reference shape), or None and why not."""
    from consolidator.rules.batch import Member, batch_aggregates
    from consolidator.rules.shape import REFERENCE_SHAPE, EventView

    if view.kind != "batch":
        return None, "an expiry record: its rows were not published"
    if not view.members:
        return None, "its rows are gone (dropped with their partition)"
    generic = any(m.items is None for m in view.members)
    if generic and shape.is_reference:
        return None, ("its rows keep events of a generic shape: set CONSOLIDATOR_AGGREGATE and"
                      " CONSOLIDATOR_MEMBER_PAYLOAD as the flusher has them")
    members = [Member(m.position, m.item_id, EventView(m.event) if m.items is None else m.items, m.first_seen_ms,
                      m.last_update_ms, m.merged_events) for m in view.members]
    try:
        return batch_aggregates(view.group_key, members, shape if generic else REFERENCE_SHAPE), None
    except (ValueError, TypeError) as exc:  # rows kept under another spec than the one set now
        return None, f"not computable with the CONSOLIDATOR_AGGREGATE set now: {exc}"


def _batch_document(view, members: bool, shape) -> dict:
    aggregates, why_not = _aggregates(view, shape)
    document = {"batch_id": view.batch_id, "group_key": view.group_key, "state": view.state, "kind": view.kind,
                "reason": view.reason, "member_count": view.member_count, "attempts": view.attempts,
                "failed_publishes": view.failed_publishes, "aggregates": aggregates,
                "claimed_at_ms": view.claimed_at_ms, "last_attempt_ms": view.last_attempt_ms,
                "finished_at_ms": view.finished_at_ms, "last_error": view.last_error,
                "held_back_ms": view.held_back_ms, "tracked": view.tracked}
    if why_not:
        document["aggregates_not_shown"] = why_not
    if members:
        document["members"] = [_member_document(m) for m in view.members]
    return document


def _compact(value: object, limit: int) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[:limit - 3] + "..."


@batch_app.command("show", cls=reads("BatchViewSettings"))
@guarded
def show(batch_id: Annotated[str, typer.Argument(help="The batch id (32 hex characters).")],
         as_json: JsonOption = False) -> None:
    """One batch, tracked or not: state, reason, publish attempts, group, last error, its
    aggregates (computed from its rows as its message computes them, with the event shape set
    now), and its members with item id, position and what their row keeps of the newest event.
    Exit 1 when unknown."""
    check_batch_ids([batch_id], as_json)
    s = load_settings("BatchViewSettings")
    view = store_for(s).batch_view(batch_id)
    if view is None:
        raise fail(f"unknown batch: no batch has the id {batch_id}", as_json, batch_id=batch_id)
    document = _batch_document(view, members=True, shape=s.shape())
    if as_json:
        emit_json(document)
        return
    now = wall_clock_ms()
    out.print(f"batch {view.batch_id} ({view.group_key}): {view.state}, {view.reason}, {view.attempts} publish"
              f" attempt(s) ({view.failed_publishes} failed), {view.member_count} members, claimed"
              f" {age_text(now, view.claimed_at_ms)} ago" + (", tracked" if view.tracked else "")
              + (f", held back {view.held_back_ms} ms" if view.held_back_ms else "")
              + (f"; last error: {view.last_error}" if view.last_error else ""), soft_wrap=True)
    aggregates = document["aggregates"]
    out.print("aggregates: " + (json.dumps(aggregates, ensure_ascii=False) if aggregates is not None
                                else f"- ({document['aggregates_not_shown']})"), soft_wrap=True)
    table = Table()
    for column in ("#", "item id", "position", "events", "newest event"):
        table.add_column(column)
    for index, m in enumerate(document["members"]):
        kept = m.get("event", m.get("items"))
        table.add_row(str(index), m["item_id"], f"{m['topic']}/{m['partition']}/{m['offset']}",
                      str(m["merged_events"]), "-" if kept is None else json.dumps(kept, ensure_ascii=False)[:120])
    out.print(table)


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
    from consolidator.rules.completion import Ack, AckFormatError
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


@batch_app.command("list", cls=reads({"": "BatchViewSettings", "with --incomplete": "CompletionSettings"}))
@guarded
def list_(
    incomplete: Annotated[bool, typer.Option("--incomplete", help="Sent batches not complete after the deadline.")] = False,
    state: Annotated[str | None, typer.Option(help="Only batches in this state: CLAIMED, SENT, DEAD or EXPIRED.")] = None,
    group: Annotated[str | None, typer.Option(help="Only batches of this group key.")] = None,
    since: Annotated[str | None, typer.Option(help="Only batches claimed since: 30m, 2h, 1d or an ISO time.")] = None,
    limit: Annotated[int, typer.Option(parser=bounded(1, MAX_LIST, integer=True),
                                       help="Show at most this many batches (1 to 100,000).")] = 100,
    as_json: JsonOption = False,
) -> None:
    """Batches, newest first, filtered by state, group and claim time, with their publish attempts
    and aggregates (as ``batch show`` computes them). With --incomplete: tracked batches that are
    overdue (sent, not complete after CONSOLIDATOR_COMPLETION_DEADLINE_SECONDS, default 3600),
    oldest first."""
    if not incomplete:
        _list_batches(state, group, since, limit, as_json)
        return
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


def _list_batches(state: str | None, group: str | None, since: str | None, limit: int, as_json: bool) -> None:
    from consolidator.store.batch_views import STATES

    if state is not None and state.upper() not in STATES:
        raise typer.BadParameter(f"{state!r}: give one of {', '.join(STATES)}", param_hint="--state")
    now = wall_clock_ms()
    since_ms = None if since is None else _since_ms(since, now)
    s = load_settings("BatchViewSettings")
    views = store_for(s).batch_views(state=None if state is None else state.upper(), group_key=group,
                                     since_ms=since_ms, limit=limit, members=True)
    documents = [_batch_document(v, members=False, shape=s.shape()) for v in views]
    if as_json:
        emit_json({"now_ms": now, "batches": documents})
        return
    table = Table(title=f"batches ({len(views)}, newest first)")
    for column in ("batch id", "group", "state", "reason", "members", "attempts", "claimed", "tracked", "aggregates"):
        table.add_column(column)
    for v, d in zip(views, documents, strict=True):
        table.add_row(v.batch_id, v.group_key, v.state, v.reason, str(v.member_count), str(v.attempts),
                      age_text(now, v.claimed_at_ms) + " ago", "yes" if v.tracked else "no",
                      "-" if d["aggregates"] is None else _compact(d["aggregates"], 60))
    out.print(table)
