"""``consolidator flush``: run flush ticks, or show what is due."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from consolidator.cli.base import (
    EXIT_FAILED,
    JsonOption,
    app,
    bounded,
    emit_json,
    err,
    guarded,
    load_settings,
    out,
    reads,
    say_error,
    store_for,
    wall_clock_ms,
)
from consolidator.rules.batch import iso_ms

if TYPE_CHECKING:
    from consolidator.services.flush import TickReport

MAX_FLUSH_SECONDS = 86_400.0  # `flush --seconds`: at most a day of ticks in one run


def _dry_run(as_json: bool) -> None:
    """Due groups and why, and which are held back by their rate limit, from the database
    alone (no Redis, sink or dead letter needed). Every flush setting that is set is checked
    first, as ``flush --once`` checks it."""
    from consolidator.services.due import due_groups_now
    from consolidator.services.flush_setup import check_batch_cap

    s = load_settings("FlushDryRunSettings")
    if s.sink_url is not None:
        check_batch_cap(s.max_batch_bytes, s.sink_url)
    now = wall_clock_ms()
    due = [
        {"group_key": d.stats.group_key, "reason": str(d.reason), "pending": d.stats.pending,
         "oldest_age_s": round((now - d.stats.oldest_first_seen_ms) / 1000, 3),
         "idle_s": round((now - d.stats.newest_update_ms) / 1000, 3),
         "throttled_until_ms": d.throttled_until_ms}
        for d in due_groups_now(store_for(s), s.policy(), now)
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


def _tick_line(number: int, report: TickReport) -> str:
    if report.skipped == "lock_unavailable":
        return f"tick {number}: skipped, no flush lock: {report.error}"
    if report.skipped:
        return f"tick {number}: skipped, another flusher holds the lock"
    return (f"tick {number}: {len(report.published)} published, {report.publish_failures} publish failures, "
            f"{report.expired} expired, {len(report.throttled)} throttled, {report.dead} dead")


@app.command(cls=reads({"": "FlushSettings", "with --dry-run": "FlushDryRunSettings"}))
@guarded
def flush(
    once: Annotated[bool, typer.Option("--once", help="Run exactly one flush tick.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Check every flush setting that is set, then show due groups and why; claim nothing. "
                          "Needs only the database.")] = False,
    seconds: Annotated[float | None, typer.Option(
        parser=bounded(0.001, MAX_FLUSH_SECONDS, " seconds"),
        help=f"Run ticks on schedule for this long (0.001 to {MAX_FLUSH_SECONDS:g} s), like one Lambda "
             "invocation; prints each tick.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Flush due groups to the sink. Exactly one of --once, --dry-run, --seconds N. Exit 1 when
    a publish failed, a batch went dead, or Redis (the flush lock) was unreachable."""
    chosen = [name for name, given in (("--once", once), ("--dry-run", dry_run), ("--seconds", seconds is not None))
              if given]
    if len(chosen) != 1:
        raise typer.BadParameter("pass exactly one of --once, --dry-run or --seconds N"
                                 + (f"; got {' and '.join(chosen)}" if chosen else ""),
                                 param_hint="/".join(chosen) or "--once")
    if dry_run:
        _dry_run(as_json)
        return
    from consolidator.services.flush_setup import build_flush_service

    s = load_settings("FlushSettings")
    service = build_flush_service(s)
    progress = err if as_json else out  # with --json, stdout holds the one JSON document

    def show(report: TickReport) -> None:
        progress.print(_tick_line(len(reports_seen) + 1, report), highlight=False)
        reports_seen.append(report)

    reports_seen: list[TickReport] = []
    try:
        if seconds is not None:
            deadline = time.monotonic() + seconds
            reports = service.run(lambda: max(0, int((deadline - time.monotonic()) * 1000)), time.sleep,
                                  on_tick=show)
        else:
            reports = [service.tick()]
    finally:
        service.sink.close()
    failures = sum(r.publish_failures for r in reports)
    dead = sum(r.dead for r in reports)
    redis_down = [r.error for r in reports if r.skipped == "lock_unavailable"]
    if as_json:
        emit_json(reports[0] if once else {"ticks": reports})
    else:
        for report in reports:
            if report.skipped and once:
                out.print(_tick_line(1, report), highlight=False)
            for b in report.published:
                out.print(f"published {b.batch_id} group={b.group_key} reason={b.reason} size={b.size} "
                          f"attempt={b.attempt}", highlight=False)
        published = sum(len(r.published) for r in reports)
        expired = sum(r.expired for r in reports)
        throttled = sum(len(r.throttled) for r in reports)  # due groups held back by their rate limit
        out.print(f"{len(reports)} tick(s): {published} batches published, {failures} publish failures, "
                  f"{expired} expired, {throttled} throttled, {dead} dead", highlight=False)
    if redis_down:
        say_error("no flush lock, so no batch was flushed in that tick", redis_down[-1])
    if failures or dead or redis_down:
        raise typer.Exit(EXIT_FAILED)
