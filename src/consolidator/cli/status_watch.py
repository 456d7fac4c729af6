"""``consolidator status --watch``: what is waiting, refreshed.

Each refresh reads the database (never writes): the pending groups ordered by when a batch of
theirs can be claimed, each with its reason-to-be as the flush policy decides it
(:func:`consolidator.services.due.pending_outlook` calls :func:`consolidator.rules.policy.next_due`:
"idle in N s", "hard window in M s", "full", "throttled until T"), the oldest pending age,
the newest batches, and the newest dead letters the database knows of (dead batches and the
expiry records of rows over the TTL; poison records are only in the dead-letter destination:
``consolidator dlq list``). On a terminal the view refreshes in place (rich Live);
piped, each refresh is a block of plain lines headed ``--- <time>`` (with ``--json``, one JSON
document per line). Ctrl-C stops it with exit 0.
"""

from __future__ import annotations

import time

from rich.console import Group
from rich.table import Table

from consolidator.cli.base import age_text, emit_json, out, store_for, wall_clock_ms
from consolidator.rules.batch import iso_ms

RECENT = 10  # newest batches and dead letters shown per refresh


def _in(now_ms: int, at_ms: int) -> str:
    return f"{max(0, at_ms - now_ms) / 1000:.0f}s"


def reason_text(group: dict, now_ms: int) -> str:
    """Why the group is waiting, and for how long: ``idle in 12s``, ``hard window in 40s``,
    ``due now (idle)``, ``throttled until <time> (in 5s)``."""
    until = group["throttled_until_ms"]
    if until is not None and until > now_ms and until >= group["due_at_ms"]:
        return f"throttled until {iso_ms(until)} (in {_in(now_ms, until)})"
    label = group["reason"].replace("_", " ")
    if group["due_at_ms"] <= now_ms:
        return f"due now ({label})"
    return f"{label} in {_in(now_ms, group['due_at_ms'])}"


def snapshot(store, policy, limit: int) -> dict:
    """One refresh of the view as a document (the ``--json`` line, and what both views print)."""
    from consolidator.services.due import pending_outlook

    now = wall_clock_ms()
    groups = pending_outlook(store, policy, now)
    oldest = min((g.stats.oldest_first_seen_ms for g in groups), default=None)
    recent = store.batch_views(limit=RECENT)
    dead = store.batch_views(state="DEAD", limit=RECENT) + store.batch_views(state="EXPIRED", limit=RECENT)
    dead.sort(key=lambda v: (v.finished_at_ms or v.claimed_at_ms, v.batch_id), reverse=True)
    counts = store.batch_counts()
    return {
        "now_ms": now,
        "pending_groups": len(groups),
        "oldest_pending_age_s": None if oldest is None else round((now - oldest) / 1000, 3),
        "groups": [
            {"group_key": g.stats.group_key, "pending": g.stats.pending, "reason": str(g.reason),
             "due_at_ms": g.due_at_ms, "throttled_until_ms": g.throttled_until_ms,
             "oldest_first_seen_ms": g.stats.oldest_first_seen_ms, "newest_update_ms": g.stats.newest_update_ms}
            for g in groups[:limit]
        ],
        "recent_batches": [
            {"batch_id": v.batch_id, "group_key": v.group_key, "state": v.state, "reason": v.reason,
             "member_count": v.member_count, "claimed_at_ms": v.claimed_at_ms, "finished_at_ms": v.finished_at_ms}
            for v in recent
        ],
        "dead_letters": [
            {"batch_id": v.batch_id, "group_key": v.group_key, "state": v.state, "member_count": v.member_count,
             "attempts": v.attempts, "at_ms": v.finished_at_ms or v.claimed_at_ms, "last_error": v.last_error}
            for v in dead[:RECENT]
        ],
        "dead_batches": counts.get("DEAD", 0),
    }


def _headline(d: dict) -> str:
    oldest = "-" if d["oldest_pending_age_s"] is None else f"{d['oldest_pending_age_s']:.0f}s"
    return (f"{iso_ms(d['now_ms'])}: {d['pending_groups']} pending group(s), oldest pending {oldest},"
            f" {d['dead_batches']} dead batch(es)")


def _dead_text(b: dict) -> str:
    what = "dead batch" if b["state"] == "DEAD" else "expired rows"
    return f"{what}, {b['member_count']} member(s)" + (f": {b['last_error']}" if b["last_error"] else "")


def plain_lines(d: dict) -> list[str]:
    """One refresh as plain lines (piped output)."""
    now = d["now_ms"]
    lines = [f"--- {_headline(d)}"]
    lines += [f"pending {g['group_key']}: {g['pending']} row(s), oldest {age_text(now, g['oldest_first_seen_ms'])},"
              f" {reason_text(g, now)}" for g in d["groups"]]
    lines += [f"batch {b['batch_id']} {b['group_key']}: {b['state']} ({b['reason']}), {b['member_count']} member(s),"
              f" claimed {age_text(now, b['claimed_at_ms'])} ago" for b in d["recent_batches"]]
    lines += [f"dead letter {b['batch_id']} {b['group_key']}: {_dead_text(b)[:160]}, {age_text(now, b['at_ms'])} ago"
              for b in d["dead_letters"]]
    return lines


def view(d: dict) -> Group:
    """One refresh as tables (a terminal)."""
    now = d["now_ms"]
    pending = Table(title="pending groups (next to flush first)")
    for column in ("group", "pending", "oldest", "why it waits"):
        pending.add_column(column)
    for g in d["groups"]:
        pending.add_row(g["group_key"], str(g["pending"]), age_text(now, g["oldest_first_seen_ms"]), reason_text(g, now))
    recent = Table(title="recent batches")
    for column in ("batch id", "group", "state", "reason", "members", "claimed"):
        recent.add_column(column)
    for b in d["recent_batches"]:
        recent.add_row(b["batch_id"], b["group_key"], b["state"], b["reason"], str(b["member_count"]),
                       age_text(now, b["claimed_at_ms"]) + " ago")
    dead = Table(title="dead letters (dead batches, expired rows)")
    for column in ("batch id", "group", "what", "when"):
        dead.add_column(column)
    for b in d["dead_letters"]:
        dead.add_row(b["batch_id"], b["group_key"], _dead_text(b)[:80], age_text(now, b["at_ms"]) + " ago")
    return Group(_headline(d), pending, recent, dead)


def on_terminal() -> bool:
    """Whether stdout is a terminal (a live view), whatever FORCE_COLOR says (a pipe gets lines)."""
    return out.file.isatty()


def watch(settings, *, interval_s: float, count: int, limit: int, as_json: bool) -> None:
    """Refresh every ``interval_s`` seconds, ``count`` times (0: until Ctrl-C)."""
    store, policy = store_for(settings), settings.policy()
    shown = 0

    def frames():
        nonlocal shown
        while count == 0 or shown < count:
            if shown:
                time.sleep(interval_s)
            shown += 1
            yield snapshot(store, policy, limit)

    try:
        if on_terminal() and not as_json:
            from rich.live import Live

            with Live(console=out, auto_refresh=False) as live:
                for d in frames():
                    live.update(view(d), refresh=True)
            return
        for d in frames():
            if as_json:
                emit_json(d)
            else:
                for line in plain_lines(d):
                    out.print(line, soft_wrap=True)
            out.file.flush()
    except KeyboardInterrupt:
        return
