"""Operator CLI: ``consolidator --help``.

Settings come from ``CONSOLIDATOR_*`` environment variables (the same ones the Lambda
functions read). Exit codes: 0 done, 1 failed or refused (the message says why),
2 usage or configuration error. Commands a script would parse accept ``--json`` and then
print exactly one JSON document on stdout.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from consolidator.errors import ConfigurationError, ConsolidatorError

if TYPE_CHECKING:  # imported lazily at run time: the CLI starts fast
    from consolidator.services.redrive import RedriveReport

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

out = Console()
err = Console(stderr=True)


def say_error(prefix: str, message: object) -> None:
    """One line on stderr: a red prefix and the message, never read as markup."""
    err.print(f"[red]{escape(prefix)}:[/] {escape(str(message))}", highlight=False, soft_wrap=True)


class _LazySubApp(TyperGroup):
    """A sub-app imported only when invoked, so ``consolidator --help`` and the other commands
    work without its dependencies (``spark`` needs the ``spark`` extra)."""

    def __init__(self, name: str, target: str, help: str) -> None:
        super().__init__(name=name, help=help)
        self._target = target
        self._real: TyperGroup | None = None

    def _load(self) -> TyperGroup:
        if self._real is None:
            module_name, attr = self._target.split(":")
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                hint = "" if (exc.name or "").startswith("consolidator") else f"; install consolidator[{self.name}]"
                say_error(f"'{self.name}' is not available", f"{exc}{hint}")
                raise typer.Exit(EXIT_USAGE) from None
            self._real = typer.main.get_command(getattr(module, attr))
        return self._real

    def make_context(self, info_name, args, parent=None, **extra):
        return self._load().make_context(info_name, args, parent=parent, **extra)

    def list_commands(self, ctx):
        return self._load().list_commands(ctx)

    def get_command(self, ctx, name):
        return self._load().get_command(ctx, name)


class _Root(TyperGroup):
    LAZY: ClassVar[dict[str, tuple[str, str]]] = {"spark": ("consolidator.spark.cli:spark_app", "Spark jobs (streaming, replay); needs the spark extra.")}

    def list_commands(self, ctx):
        return [*super().list_commands(ctx), *self.LAZY]

    def get_command(self, ctx, name):
        if name in self.LAZY:
            target, help_text = self.LAZY[name]
            return _LazySubApp(name, target, help_text)
        return super().get_command(ctx, name)


app = typer.Typer(
    cls=_Root,
    help="Operate the Consolidator buffer: migrate, inspect, flush, redrive, partitions, demo.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
dlq_app = typer.Typer(help="Dead-letter destination: poison events and dead batches.", no_args_is_help=True)
partitions_app = typer.Typer(help="Monthly partitions of the buffer.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(dlq_app, name="dlq")
app.add_typer(partitions_app, name="partitions")

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


# -- plumbing ---------------------------------------------------------------------------------


def guarded(command: Callable) -> Callable:
    """Map the project's errors to one clear line and the documented exit codes."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except ConfigurationError as exc:
            say_error("configuration error", exc)
            raise typer.Exit(EXIT_USAGE) from None
        except ConsolidatorError as exc:
            say_error("error", exc)
            raise typer.Exit(EXIT_FAILED) from None

    return wrapper


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def emit_json(document: Any) -> None:
    typer.echo(json.dumps(_jsonable(document), sort_keys=True))


def _settings(model_name: str):
    from consolidator import settings

    return settings.load_settings(getattr(settings, model_name))


def _store(s):
    from consolidator.store import open_store

    return open_store(s.database_url, s.database_secret_arn)


def _now_ms() -> int:
    from consolidator.clock import SystemClock

    return SystemClock().now_ms()


def _age(now_ms: int, then_ms: int | None) -> str:
    if then_ms is None:
        return "-"
    seconds = max(0, (now_ms - then_ms) / 1000)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


# -- db -------------------------------------------------------------------------------------


@db_app.command("migrate")
@guarded
def db_migrate(as_json: JsonOption = False) -> None:
    """Create or upgrade the schema (idempotent: applies only the missing migrations)."""
    store = _store(_settings("CleanupSettings"))
    applied = store.migrate(_now_ms())
    version = store.schema_version()
    if as_json:
        emit_json({"applied": applied, "schema_version": version})
    elif applied:
        out.print(f"applied migrations {applied}; schema version {version}")
    else:
        out.print(f"schema is up to date (version {version})")


# -- status ---------------------------------------------------------------------------------


def _partition_rows(store, cleanup) -> list[dict]:
    keep_from = cleanup.plan().keep_from
    from consolidator.services.cleanup import expired

    rows = []
    for p in store.partitions():
        rows.append({
            "name": p.name,
            "less_than": p.less_than,
            "rows_estimate": p.rows,
            "unsent_rows": store.unsent_rows_in_partition(p.name),
            "expired": expired(p, keep_from),
        })
    return rows


def _cleanup_service(s, store):
    from consolidator.clock import SystemClock
    from consolidator.services.cleanup import CleanupService

    return CleanupService(store, SystemClock(), s.retention_months, s.partitions_ahead)


@app.command()
@guarded
def status(
    as_json: JsonOption = False,
    limit: Annotated[int, typer.Option(help="Show at most this many groups and batches.")] = 50,
) -> None:
    """Pending rows and oldest age per group, claimed and dead batches, partitions."""
    s = _settings("CleanupSettings")
    store = _store(s)
    now = _now_ms()
    groups = store.pending_group_stats()
    groups.sort(key=lambda g: (g.oldest_first_seen_ms, g.group_key))
    document = {
        "now_ms": now,
        "rows": store.row_counts(),
        "batches": store.batch_counts(),
        "groups": [
            {
                "group_key": g.group_key,
                "pending": g.pending,
                "oldest_age_s": round((now - g.oldest_first_seen_ms) / 1000, 3),
                "idle_s": round((now - g.newest_update_ms) / 1000, 3),
            }
            for g in groups[:limit]
        ],
        "pending_groups": len(groups),
        "claimed": store.batches_in_state("CLAIMED", limit),
        "dead": store.batches_in_state("DEAD", limit),
        "partitions": _partition_rows(store, _cleanup_service(s, store)),
    }
    if as_json:
        emit_json(document)
        return
    rows, batches = document["rows"], document["batches"]
    out.print(
        "rows: " + ", ".join(f"{k} {rows.get(k, 0)}" for k in ("PENDING", "CLAIMED", "SENT", "DEAD"))
        + "   batches: " + ", ".join(f"{k} {batches.get(k, 0)}" for k in ("CLAIMED", "SENT", "DEAD"))
    )
    table = Table(title=f"pending groups ({len(groups)}, oldest first)")
    for column in ("group", "pending", "oldest", "idle"):
        table.add_column(column, justify="left" if column == "group" else "right")
    for g in groups[:limit]:
        table.add_row(g.group_key, str(g.pending), _age(now, g.oldest_first_seen_ms), _age(now, g.newest_update_ms))
    out.print(table)
    for state in ("claimed", "dead"):
        if document[state]:
            table = Table(title=f"{state} batches")
            for column in ("batch id", "group", "members", "attempts", "claimed", "last error"):
                table.add_column(column)
            for b in document[state]:
                table.add_row(b["batch_id"], b["group_key"], str(b["member_count"]), str(b["attempts"]),
                              _age(now, b["claimed_at_ms"]) + " ago", (b["last_error"] or "")[:60])
            out.print(table)
    out.print(_partitions_table(document["partitions"]))


def _partitions_table(partitions: list[dict]) -> Table:
    table = Table(title="partitions of buffer_rows")
    for column in ("name", "holds buckets below", "rows (estimate)", "unsent rows", "past retention"):
        table.add_column(column)
    for p in partitions:
        table.add_row(p["name"], "MAXVALUE" if p["less_than"] is None else str(p["less_than"]),
                      str(p["rows_estimate"]), str(p["unsent_rows"]), "yes" if p["expired"] else "")
    return table


# -- flush ----------------------------------------------------------------------------------


@app.command()
@guarded
def flush(
    once: Annotated[bool, typer.Option("--once", help="Run exactly one flush tick (required unless --seconds).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show due groups and why; claim nothing.")] = False,
    seconds: Annotated[float | None, typer.Option(help="Run ticks on schedule for this long, like one Lambda invocation.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Flush due groups to the sink. Exit 1 when a publish failed or a batch went dead."""
    if not once and seconds is None and not dry_run:
        raise typer.BadParameter("pass --once, --dry-run or --seconds N", param_hint="--once")
    from consolidator.services.flush import build_flush_service

    s = _settings("FlushSettings")
    service = build_flush_service(s)
    if dry_run:
        service.sink.close()
        now = _now_ms()
        due = [
            {"group_key": g.group_key, "reason": str(reason), "pending": g.pending,
             "oldest_age_s": round((now - g.oldest_first_seen_ms) / 1000, 3),
             "idle_s": round((now - g.newest_update_ms) / 1000, 3)}
            for g, reason in service.due()
        ]
        if as_json:
            emit_json({"dry_run": True, "due": due})
            return
        table = Table(title=f"due groups ({len(due)}); nothing was claimed")
        for column in ("group", "reason", "pending", "oldest", "idle"):
            table.add_column(column)
        for d in due:
            table.add_row(d["group_key"], d["reason"], str(d["pending"]), f"{d['oldest_age_s']:.0f}s",
                          f"{d['idle_s']:.0f}s")
        out.print(table)
        return
    try:
        if seconds is not None and not once:
            deadline = time.monotonic() + seconds
            reports = service.run(lambda: max(0, int((deadline - time.monotonic()) * 1000)), time.sleep)
        else:
            reports = [service.tick()]
    finally:
        service.sink.close()
    failures = sum(r.publish_failures for r in reports)
    dead = sum(r.dead for r in reports)
    if as_json:
        emit_json(reports[0] if once else {"ticks": reports})
    else:
        for report in reports:
            if report.skipped:
                out.print(f"tick skipped: {report.skipped} (another flusher holds the lock, or Redis is down)")
            for b in report.published:
                out.print(f"published {b.batch_id} group={b.group_key} reason={b.reason} size={b.size} "
                          f"attempt={b.attempt}")
        published = sum(len(r.published) for r in reports)
        out.print(f"{len(reports)} tick(s): {published} batches published, {failures} publish failures, "
                  f"{dead} dead")
    if failures or dead:
        raise typer.Exit(EXIT_FAILED)


# -- dead letter ----------------------------------------------------------------------------


def _read_dead_letter(url: str, limit: int) -> list[tuple[dict, str | None]]:
    """Entries with their SQS receipt handles (None for a file destination)."""
    from consolidator.deadletter import FileDeadLetter, dead_letter_from_url

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


def _delete_settled(url: str, received: list[tuple[dict, str | None]], report: RedriveReport) -> dict:
    """Delete from an SQS dead letter the poison entries the redrive stored (or found stored);
    entries still poison, failed, or not poison events stay."""
    from consolidator.deadletter import dead_letter_from_url

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
    try:
        return [json.loads(line) for line in lines if line.strip()]
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"{path} is not JSON lines: {exc}", param_hint="--file") from None


@dlq_app.command("list")
@guarded
def dlq_list(
    as_json: JsonOption = False,
    limit: Annotated[int, typer.Option(help="Read at most this many entries.")] = 100,
) -> None:
    """Poison events in the dead-letter destination and DEAD batches in the buffer.
    (On SQS, listing receives the messages: they reappear after the visibility timeout.)"""
    s = _settings("IngestSettings")
    entries = [entry for entry, _ in _read_dead_letter(s.dead_letter_url, limit)]
    dead = _store(s).batches_in_state("DEAD", limit)
    if as_json:
        emit_json({"entries": entries, "dead_batches": dead})
        return
    table = Table(title=f"dead-letter entries ({len(entries)}) at {s.dead_letter_url}")
    for column in ("kind", "reason", "source / batch", "detail"):
        table.add_column(column)
    for e in entries:
        where = e.get("source") or {}
        ident = (f"{where.get('topic')}-{where.get('partition')}@{where.get('offset')}" if where
                 else (e.get("batch") or {}).get("batch_id", "?"))
        table.add_row(str(e.get("kind")), str(e.get("reason")), ident, str(e.get("detail", ""))[:70])
    out.print(table)
    table = Table(title=f"DEAD batches in the buffer ({len(dead)})")
    for column in ("batch id", "group", "members", "attempts", "last error"):
        table.add_column(column)
    for b in dead:
        table.add_row(b["batch_id"], b["group_key"], str(b["member_count"]), str(b["attempts"]),
                      (b["last_error"] or "")[:60])
    out.print(table)


@dlq_app.command("redrive")
@guarded
def dlq_redrive(
    file: Annotated[Path | None, typer.Option("--file", help="JSON lines of fixed poison entries.")] = None,
    from_dead_letter: Annotated[bool, typer.Option(
        "--from-dead-letter", help="Read poison entries from CONSOLIDATOR_DEAD_LETTER_URL.")] = False,
    batches: Annotated[bool, typer.Option(
        "--batches", help="Revive DEAD batches and re-publish them (same batch ids) with one flush tick.")] = False,
    batch_id: Annotated[list[str] | None, typer.Option(
        "--batch-id", help="Only these DEAD batches (repeatable; implies --batches).")] = None,
    limit: Annotated[int, typer.Option(help="Read at most this many entries / batches.")] = 10_000,
    as_json: JsonOption = False,
) -> None:
    """Re-ingest fixed poison events through the real ingest service, or re-publish DEAD
    batches. Idempotent: positions already stored are no-ops; only DEAD batches are revived.
    Exit 1 when an entry is still poison, a record failed, or a re-publish failed."""
    batches = batches or bool(batch_id)
    if not (file or from_dead_letter or batches):
        raise typer.BadParameter("pass --file PATH, --from-dead-letter or --batches", param_hint="--file")
    document: dict[str, Any] = {}
    ok = True
    if file or from_dead_letter:
        from consolidator.services.ingest import build_ingest_service
        from consolidator.services.redrive import redrive_poison

        s = _settings("IngestSettings")
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
        from consolidator.services.flush import build_flush_service

        s = _settings("FlushSettings")
        service = build_flush_service(s)
        store = service.store
        targets = batch_id or [b["batch_id"] for b in store.batches_in_state("DEAD", limit)]
        revived = [b for b in targets if store.revive_dead_batch(b)]
        try:
            tick = service.tick() if revived else None
        finally:
            service.sink.close()
        published = [] if tick is None else [b.batch_id for b in tick.published if b.batch_id in revived]
        missing = [b for b in revived if b not in published]
        document["batches"] = {"revived": revived, "republished": published, "not_yet_published": missing,
                               "skipped_not_dead": [b for b in targets if b not in revived]}
        ok &= not missing
        if not as_json:
            out.print(f"dead batches: {len(revived)} revived, {len(published)} re-published"
                      + (f", {len(missing)} still CLAIMED (the next flush tick retries them)" if missing else ""))
    if as_json:
        emit_json(document | {"ok": ok})
    if not ok:
        raise typer.Exit(EXIT_FAILED)


# -- partitions -----------------------------------------------------------------------------


@partitions_app.command("list")
@guarded
def partitions_list(as_json: JsonOption = False) -> None:
    """Partitions with row estimates, unsent rows and whether they are past the retention."""
    s = _settings("CleanupSettings")
    store = _store(s)
    rows = _partition_rows(store, _cleanup_service(s, store))
    if as_json:
        emit_json({"partitions": rows})
    else:
        out.print(_partitions_table(rows))


@partitions_app.command("ensure")
@guarded
def partitions_ensure(
    ahead: Annotated[int | None, typer.Option(
        min=1, help="Months ahead of this month (default CONSOLIDATOR_PARTITIONS_AHEAD).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Split MAXVALUE so every month through N months ahead has a partition (idempotent)."""
    s = _settings("CleanupSettings")
    store = _store(s)
    service = _cleanup_service(s, store)
    if ahead is not None:
        service.partitions_ahead = ahead
    report = service.ensure()
    if as_json:
        emit_json({"created": report.created, "ensured_through": report.ensured_through})
    else:
        out.print(f"created {', '.join(report.created) or 'nothing'}; partitions exist through {report.ensured_through}")


@partitions_app.command("drop")
@guarded
def partitions_drop(
    names: Annotated[list[str] | None, typer.Argument(help="Partitions to drop, e.g. p202601.")] = None,
    expired_only: Annotated[bool, typer.Option(
        "--expired", help="Drop every partition past CONSOLIDATOR_RETENTION_MONTHS.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Allow naming a partition within the retention (loses replay protection).")] = False,
    as_json: JsonOption = False,
) -> None:
    """Drop partitions that hold no PENDING or CLAIMED row. Refuses (exit 1) otherwise and
    says how many unsent rows block the drop."""
    if not names and not expired_only:
        raise typer.BadParameter("name partitions to drop or pass --expired", param_hint="NAMES")
    from consolidator.services.cleanup import expired

    s = _settings("CleanupSettings")
    store = _store(s)
    service = _cleanup_service(s, store)
    plan = service.plan()
    existing = {p.name: p for p in store.partitions()}
    targets = list(names or []) + ([p.name for p in service.candidates(plan)] if expired_only else [])
    dropped, refused, errors = [], [], []
    for name in dict.fromkeys(targets):
        partition = existing.get(name)
        if partition is None or partition.less_than is None:
            errors.append({"partition": name, "error": "no such partition" if partition is None
                           else "the MAXVALUE partition is never dropped"})
            continue
        if not force and not expired(partition, plan.keep_from):
            errors.append({"partition": name, "error": f"within the retention (months from {plan.keep_from} "
                           "are kept); pass --force to drop it anyway"})
            continue
        unsent = store.drop_partition_if_sent(name)
        if unsent:
            refused.append({"partition": name, "unsent_rows": unsent})
        else:
            dropped.append(name)
    if as_json:
        emit_json({"dropped": dropped, "refused": refused, "errors": errors})
    else:
        for name in dropped:
            out.print(f"dropped {name}")
        for r in refused:
            say_error("refused", f"{r['partition']} holds {r['unsent_rows']} unsent (PENDING/CLAIMED) rows")
        for e in errors:
            say_error("not dropped", f"{e['partition']}: {e['error']}")
        if not targets:
            out.print("no partition is past the retention")
    if refused or errors:
        raise typer.Exit(EXIT_FAILED)


# -- demo -----------------------------------------------------------------------------------


@app.command()
def demo(
    warehouses: Annotated[int, typer.Option(min=1, help="Distinct group keys.")] = 20,
    orders: Annotated[int, typer.Option(min=1, help="Distinct orders produced.")] = 3000,
    poison: Annotated[int, typer.Option(min=0, help="Poison messages mixed in.")] = 5,
    seed: Annotated[int, typer.Option(help="Random seed of the synthetic topic.")] = 7,
    bursts: Annotated[int, typer.Option(min=1, help="Bursts the orders arrive in (pauses between).")] = 8,
    database_url: Annotated[str | None, typer.Option(
        help="Database server for the demo database (default: CONSOLIDATOR_DATABASE_URL's server, "
             "else mysql://root@127.0.0.1:3306).")] = None,
    database_name: Annotated[str, typer.Option(
        help="Demo database, DROPPED and recreated on every run.")] = "consolidator_demo",
    redis_url: Annotated[str, typer.Option(envvar="CONSOLIDATOR_REDIS_URL", help="Redis for the flush lock.")
                         ] = "redis://127.0.0.1:6379/0",
    verbose: Annotated[bool, typer.Option("--verbose", help="Handler logs at WARNING; keep the work files.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Run the whole product locally and check that nothing was lost or duplicated.

    Mock Kafka in, the real ingest and flush handlers, batches out to a Kafka topic and read
    back. Exit 0 only when the invariant check passes."""
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


def main() -> None:  # pragma: no cover - console entry point alias
    app()
