"""``consolidator partitions``: monthly partitions of the buffer."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from consolidator.cli.base import (
    EXIT_FAILED,
    JsonOption,
    as_setting,
    emit_json,
    guarded,
    load_settings,
    out,
    reads,
    say_error,
    store_for,
)

partitions_app = typer.Typer(help="Monthly partitions of the buffer.", no_args_is_help=True)


def partition_rows(store, cleanup) -> list[dict]:
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


def cleanup_service(s, store):
    from consolidator.rules.clock import SystemClock
    from consolidator.services.cleanup import CleanupService

    return CleanupService(store, SystemClock(), s.retention_months, s.partitions_ahead)


def partitions_table(partitions: list[dict]) -> Table:
    table = Table(title="partitions of buffer_rows")
    for column in ("name", "holds buckets below", "rows (estimate)", "unsent rows", "past retention"):
        table.add_column(column)
    for p in partitions:
        table.add_row(p["name"], "MAXVALUE" if p["less_than"] is None else str(p["less_than"]),
                      str(p["rows_estimate"]), str(p["unsent_rows"]), "yes" if p["expired"] else "")
    return table


@partitions_app.command("list", cls=reads("CleanupSettings"))
@guarded
def partitions_list(as_json: JsonOption = False) -> None:
    """Partitions with row estimates, unsent rows and whether they are past the retention."""
    s = load_settings("CleanupSettings")
    store = store_for(s)
    rows = partition_rows(store, cleanup_service(s, store))
    if as_json:
        emit_json({"partitions": rows})
    else:
        out.print(partitions_table(rows))


@partitions_app.command("ensure", cls=reads("CleanupSettings"))
@guarded
def partitions_ensure(
    ahead: Annotated[int | None, typer.Option(
        parser=as_setting("partitions_ahead"),
        help="Months ahead of this month (default and bounds: CONSOLIDATOR_PARTITIONS_AHEAD).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Split MAXVALUE so every month through N months ahead has a partition (idempotent)."""
    s = load_settings("CleanupSettings")
    store = store_for(s)
    service = cleanup_service(s, store)
    if ahead is not None:
        service.partitions_ahead = ahead
    report = service.ensure()
    if as_json:
        emit_json({"created": report.created, "ensured_through": report.ensured_through})
    else:
        out.print(f"created {', '.join(report.created) or 'nothing'}; partitions exist through {report.ensured_through}")


@partitions_app.command("drop", cls=reads("CleanupSettings"))
@guarded
def partitions_drop(
    names: Annotated[list[str] | None, typer.Argument(help="Partitions to drop, e.g. p202601.")] = None,
    expired_only: Annotated[bool, typer.Option(
        "--expired", help="Drop every partition past CONSOLIDATOR_RETENTION_MONTHS.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Allow naming a partition within the retention (its rows and applied positions go).")] = False,
    as_json: JsonOption = False,
) -> None:
    """Drop partitions that hold no unsent row (PENDING, or CLAIMED under a batch still CLAIMED).
    Refuses (exit 1) otherwise and says how many unsent rows block the drop."""
    if not names and not expired_only:
        raise typer.BadParameter("name partitions to drop or pass --expired", param_hint="NAMES")
    from consolidator.services.cleanup import expired

    s = load_settings("CleanupSettings")
    store = store_for(s)
    service = cleanup_service(s, store)
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
            say_error("refused", f"{r['partition']} holds {r['unsent_rows']} unsent (PENDING or in a CLAIMED batch) rows")
        for e in errors:
            say_error("not dropped", f"{e['partition']}: {e['error']}")
        if not targets:
            out.print("no partition is past the retention")
    if refused or errors:
        raise typer.Exit(EXIT_FAILED)
