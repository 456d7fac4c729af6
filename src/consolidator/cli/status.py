"""``consolidator status``: pending groups, claimed and dead batches, partitions."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from consolidator.cli.base import (
    MAX_LIST,
    JsonOption,
    age_text,
    app,
    bounded,
    emit_json,
    guarded,
    load_settings,
    out,
    reads,
    store_for,
    wall_clock_ms,
)
from consolidator.cli.partitions import cleanup_service, partition_rows, partitions_table
from consolidator.rules.batch import iso_ms


@app.command(cls=reads({"": "CleanupSettings", "with --watch": "FlushDryRunSettings"}))
@guarded
def status(
    as_json: JsonOption = False,
    limit: Annotated[int, typer.Option(parser=bounded(0, MAX_LIST, integer=True), help="Show at most this many groups and batches (0 to 100,000).")] = 50,
    watch: Annotated[bool, typer.Option("--watch", help="Refresh a live view of what waits: pending groups by when they"
                                        " flush and why, recent and dead batches (Ctrl-C stops).")] = False,
    interval: Annotated[float, typer.Option(parser=bounded(0.1, 3600, " s"),
                                            help="With --watch: seconds between refreshes (0.1 to 3,600).")] = 2.0,
    count: Annotated[int, typer.Option(parser=bounded(0, 1_000_000, integer=True),
                                       help="With --watch: stop after this many refreshes (0: until Ctrl-C).")] = 0,
) -> None:
    """Pending rows and oldest age per group, throttled groups, claimed and dead batches, partitions.
    With --watch: refreshed in place on a terminal, a block of plain lines per refresh when piped
    (one JSON document per line with --json); the flush settings' policy decides why and when
    each group is due."""
    if watch:
        from consolidator.cli.status_watch import watch as watch_view

        watch_view(load_settings("FlushDryRunSettings"), interval_s=interval, count=count, limit=limit,
                   as_json=as_json)
        return
    s = load_settings("CleanupSettings")
    store = store_for(s)
    now = wall_clock_ms()
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
        "throttled": [
            {"group_key": t["group_key"], "throttled_for_s": round((now - t["throttled_since_ms"]) / 1000, 3),
             "next_allowed_ms": t["throttled_until_ms"],
             "next_allowed_in_s": round(max(0, t["throttled_until_ms"] - now) / 1000, 3)}
            for t in store.throttled_groups()[:limit]
        ],
        "claimed": store.batches_in_state("CLAIMED", limit),
        "dead": store.batches_in_state("DEAD", limit),
        "partitions": partition_rows(store, cleanup_service(s, store)),
    }
    if as_json:
        emit_json(document)
        return
    rows, batches = document["rows"], document["batches"]
    out.print(
        "rows: " + ", ".join(f"{k} {rows.get(k, 0)}" for k in ("PENDING", "CLAIMED", "SENT", "DEAD"))
        + f", EXPIRED {rows.get('EXPIRED', 0)}"
        + "   batches: " + ", ".join(f"{k} {batches.get(k, 0)}" for k in ("CLAIMED", "SENT", "DEAD"))
    )
    table = Table(title=f"pending groups ({len(groups)}, oldest first)")
    for column in ("group", "pending", "oldest", "idle"):
        table.add_column(column, justify="left" if column == "group" else "right")
    for g in groups[:limit]:
        table.add_row(g.group_key, str(g.pending), age_text(now, g.oldest_first_seen_ms), age_text(now, g.newest_update_ms))
    out.print(table)
    if document["throttled"]:
        table = Table(title="throttled groups (due, held back by their rate limit)")
        for column in ("group", "held back for", "next allowed"):
            table.add_column(column)
        for t in document["throttled"]:
            table.add_row(t["group_key"], f"{t['throttled_for_s']:.0f}s",
                          f"{iso_ms(t['next_allowed_ms'])} (in {t['next_allowed_in_s']:.0f}s)")
        out.print(table)
    for state in ("claimed", "dead"):
        if document[state]:
            table = Table(title=f"{state} batches")
            for column in ("batch id", "group", "members", "attempts", "claimed", "last error"):
                table.add_column(column)
            for b in document[state]:
                table.add_row(b["batch_id"], b["group_key"], str(b["member_count"]), str(b["attempts"]),
                              age_text(now, b["claimed_at_ms"]) + " ago", (b["last_error"] or "")[:60])
            out.print(table)
    out.print(partitions_table(document["partitions"]))
