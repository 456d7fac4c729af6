"""``consolidator dlq``: list and redrive the dead-letter destination."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from consolidator.cli.base import (
    EXIT_FAILED,
    MAX_LIST,
    JsonOption,
    bounded,
    check_batch_ids,
    emit_json,
    guarded,
    load_settings,
    out,
    reads,
    say_error,
    store_for,
)
from consolidator.rules.errors import BatchRowsGone
from consolidator.support.redact import masked

if TYPE_CHECKING:  # imported lazily at run time: the CLI starts fast
    from consolidator.services.redrive import RedriveReport

dlq_app = typer.Typer(help="Dead-letter destination: poison events and dead batches.", no_args_is_help=True)


def _read_dead_letter(url: str, limit: int) -> list[tuple[dict, str | None]]:
    """Entries with their SQS receipt handles (None for a file destination)."""
    from consolidator.sinks.deadletter import FileDeadLetter, dead_letter_from_url

    destination = dead_letter_from_url(url)
    if isinstance(destination, FileDeadLetter):
        return [(entry, None) for entry in destination.read()[:limit]]
    received: list[tuple[dict, str | None]] = []
    seen: set[str] = set()
    while len(received) < limit:
        # Received messages stay invisible until their visibility timeout; with a short timeout
        # they come back, so stop at the first receive that brings nothing new.
        fresh = []
        for entry, handle in destination.receive(min(10, limit - len(received))):
            key = json.dumps(entry, sort_keys=True)
            if key not in seen:
                seen.add(key)
                fresh.append((entry, handle))
        if not fresh:
            break
        received.extend(fresh)
    return received


def _distinct(entries: list[dict]) -> list[dict]:
    """One entry per idempotency key (the first written), with ``count`` = times written."""
    from consolidator.rules.deadletter import idempotency_key

    first: dict[str, dict] = {}
    for entry in entries:
        key = idempotency_key(entry)
        if key in first:
            first[key]["count"] += 1
        else:
            first[key] = entry | {"idempotency_key": key, "count": 1}
    return list(first.values())


def _delete_settled(url: str, received: list[tuple[dict, str | None]], report: RedriveReport) -> dict:
    """Delete from an SQS dead letter the poison entries the redrive stored (or found stored);
    entries still poison, failed, or not poison events stay."""
    from consolidator.sinks.deadletter import dead_letter_from_url

    unsettled = {json.dumps(p["source"], sort_keys=True) for p in [*report.still_poison, *report.failed]}
    handles = [handle for entry, handle in received
               if handle and entry.get("kind") == "poison"
               and json.dumps(entry.get("source"), sort_keys=True) not in unsettled]
    if not handles:
        return {"deleted": 0, "delete_failed": 0}
    failed = dead_letter_from_url(url).delete(handles)
    return {"deleted": len(handles) - failed, "delete_failed": failed}


def _read_jsonl(path: Path) -> list[dict]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc}", param_hint="--file") from None
    from consolidator.sources.files import parse_json

    try:
        return [parse_json(line) for line in lines if line.strip()]
    except ValueError as exc:  # JSONDecodeError, or nested too deeply
        raise typer.BadParameter(f"{path} is not JSON lines: {exc}", param_hint="--file") from None


@dlq_app.command("list", cls=reads("IngestSettings"))
@guarded
def dlq_list(
    as_json: JsonOption = False,
    limit: Annotated[int, typer.Option(parser=bounded(0, MAX_LIST, integer=True), help="Read at most this many entries (0 to 100,000).")] = 100,
) -> None:
    """Poison events, expired rows and dead batches in the dead-letter destination, and DEAD
    batches in the buffer. An entry written more than once (same idempotency key: kind and
    source position, or batch id) is shown once, with its count.
    (On SQS, listing receives the messages: they reappear after the visibility timeout.)"""
    s = load_settings("IngestSettings")
    entries = _distinct([entry for entry, _ in _read_dead_letter(s.dead_letter_url, limit)])
    dead = store_for(s).batches_in_state("DEAD", limit)
    if as_json:
        emit_json({"entries": entries, "dead_batches": dead})
        return
    table = Table(title=f"dead-letter entries ({len(entries)}) at {masked(s.dead_letter_url)}")
    for column in ("kind", "reason", "source / batch", "written", "detail"):
        table.add_column(column)
    for e in entries:
        where = e.get("source") or {}
        ident = (f"{where.get('topic')}-{where.get('partition')}@{where.get('offset')}" if where
                 else (e.get("batch") or {}).get("batch_id", "?"))
        table.add_row(str(e.get("kind")), str(e.get("reason")), ident, f"{e['count']}x",
                      str(e.get("detail", ""))[:70])
    out.print(table)
    table = Table(title=f"DEAD batches in the buffer ({len(dead)})")
    for column in ("batch id", "group", "members", "attempts", "last error"):
        table.add_column(column)
    for b in dead:
        table.add_row(b["batch_id"], b["group_key"], str(b["member_count"]), str(b["attempts"]),
                      (b["last_error"] or "")[:60])
    out.print(table)


@dlq_app.command("redrive", cls=reads({"with --file or --from-dead-letter": "IngestSettings",
                                                     "with --batches or --batch-id": "FlushSettings"}))
@guarded
def dlq_redrive(
    file: Annotated[Path | None, typer.Option("--file", help="JSON lines of fixed poison entries.")] = None,
    from_dead_letter: Annotated[bool, typer.Option(
        "--from-dead-letter", help="Read poison entries from CONSOLIDATOR_DEAD_LETTER_URL.")] = False,
    batches: Annotated[bool, typer.Option(
        "--batches", help="Revive DEAD batches and re-publish them (same batch ids) with one flush tick.")] = False,
    batch_id: Annotated[list[str] | None, typer.Option(
        "--batch-id", help="Only these DEAD batches (repeatable; implies --batches).")] = None,
    limit: Annotated[int, typer.Option(parser=bounded(0, MAX_LIST, integer=True), help="Read at most this many entries / batches (0 to 100,000).")] = 10_000,
    as_json: JsonOption = False,
) -> None:
    """Re-ingest fixed poison events through the real ingest service, or re-publish DEAD
    batches. Idempotent: positions already stored are no-ops; only DEAD batches are revived.
    Exit 1 when an entry is still poison, a record failed, or a re-publish failed."""
    batches = batches or bool(batch_id)
    if not (file or from_dead_letter or batches):
        raise typer.BadParameter("pass --file PATH, --from-dead-letter or --batches", param_hint="--file")
    check_batch_ids(batch_id or [], as_json)
    document: dict[str, Any] = {}
    ok = True
    if file or from_dead_letter:
        from consolidator.services.ingest import build_ingest_service
        from consolidator.services.redrive import redrive_poison

        s = load_settings("IngestSettings")
        entries = _read_jsonl(file)[:limit] if file else []
        received = _read_dead_letter(s.dead_letter_url, limit - len(entries)) if from_dead_letter else []
        report = redrive_poison([*entries, *(entry for entry, _ in received)], build_ingest_service(s))
        document["poison"] = report
        ok &= report.ok
        if received:
            document["dead_letter"] = _delete_settled(s.dead_letter_url, received, report)
            ok &= not document["dead_letter"]["delete_failed"]
        if not as_json:
            out.print(f"poison redrive: {report.read} entries read, {report.stored} stored "
                      f"({report.coalesced} coalesced), {report.replayed} already stored, "
                      f"{report.skipped} skipped (not poison)")
            for p in report.still_poison:
                say_error("still poison", f"{p['source']} {p['reason']}: {p['detail']}")
            for p in report.failed:
                say_error("failed (retry the redrive)", p)
            if "dead_letter" in document:
                out.print(f"dead letter: {document['dead_letter']['deleted']} settled entries deleted")
                if document["dead_letter"]["delete_failed"]:
                    say_error("not deleted (a second redrive is a no-op and deletes them)",
                              document["dead_letter"]["delete_failed"])
    if batches:
        from consolidator.services.flush_setup import build_flush_service

        s = load_settings("FlushSettings")
        service = build_flush_service(s)
        store = service.store
        targets = batch_id or [b["batch_id"] for b in store.batches_in_state("DEAD", limit)]
        revived, rows_gone = [], []
        unknown = [b for b in dict.fromkeys(batch_id or []) if store.batch_state(b) is None]
        for target in unknown:
            say_error(f"unknown batch {target}", "no such batch in the buffer (never claimed, or cleaned up)")
        for target in targets:
            try:
                if store.revive_dead_batch(target):
                    revived.append(target)
            except BatchRowsGone as exc:
                rows_gone.append(target)
                say_error("not revived", str(exc))
        try:
            tick = service.tick() if revived else None
        finally:
            service.sink.close()
        published = [] if tick is None else [b.batch_id for b in tick.published if b.batch_id in revived]
        missing = [b for b in revived if b not in published]
        document["batches"] = {"revived": revived, "republished": published, "not_yet_published": missing,
                               "rows_gone": rows_gone, "unknown": unknown,
                               "skipped_not_dead": [b for b in targets
                                                    if b not in revived and b not in rows_gone and b not in unknown]}
        ok &= not missing and not rows_gone and not unknown
        if not as_json:
            out.print(f"dead batches: {len(revived)} revived, {len(published)} re-published"
                      + (f", {len(missing)} still CLAIMED (the next flush tick retries them)" if missing else ""))
    if as_json:
        emit_json(document | {"ok": ok})
    if not ok:
        raise typer.Exit(EXIT_FAILED)
