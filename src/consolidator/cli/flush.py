"""``consolidator flush``: run flush ticks, or show what is due."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table

from consolidator.batch import iso_ms
from consolidator.cli.base import (
    EXIT_FAILED,
    JsonOption,
    app,
    emit_json,
    guarded,
    load_settings,
    out,
    wall_clock_ms,
)


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

    s = load_settings("FlushSettings")
    service = build_flush_service(s)
    if dry_run:
        service.sink.close()
        now = wall_clock_ms()
        due = [
            {"group_key": d.stats.group_key, "reason": str(d.reason), "pending": d.stats.pending,
             "oldest_age_s": round((now - d.stats.oldest_first_seen_ms) / 1000, 3),
             "idle_s": round((now - d.stats.newest_update_ms) / 1000, 3),
             "throttled_until_ms": d.throttled_until_ms}
            for d in service.dry_run()
        ]
        if as_json:
            emit_json({"dry_run": True, "due": due})
            return
        table = Table(title=f"due groups ({len(due)}); nothing was claimed")
        for column in ("group", "reason", "pending", "oldest", "idle", "throttled"):
            table.add_column(column)
        for d in due:
            table.add_row(d["group_key"], d["reason"], str(d["pending"]), f"{d['oldest_age_s']:.0f}s",
                          f"{d['idle_s']:.0f}s", "-" if d["throttled_until_ms"] is None else "yes")
        out.print(table)
        for d in due:
            if d["throttled_until_ms"] is not None:
                out.print(f"{d['group_key']}: due but throttled until {iso_ms(d['throttled_until_ms'])}",
                          highlight=False, soft_wrap=True)
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
