"""``consolidator status --watch`` piped (typer's runner: not a terminal), against the real
database: pending groups in the order they flush, each with why it waits as the policy decides."""

from __future__ import annotations

import json

from support import record
from test_cli import NOW, cli, cli_json, env, flush_env, migrated  # noqa: F401 (fixtures)

from consolidator.rules.clock import SystemClock
from consolidator.rules.events import FieldNames, decode


def _ingest(store, at_ms: int, offset: int, order: str, location: str, timestamp_ms: int = NOW) -> None:
    store.ingest([decode(record(offset, order=order, location=location, timestamp_ms=timestamp_ms), FieldNames(),
                         1 << 20)], at_ms)


def test_watch_orders_pending_groups_by_when_they_flush_and_says_why(flush_env, migrated):  # noqa: F811
    now = SystemClock().now_ms()  # the CLI's wall clock (test_cli's NOW is when the module was imported)
    limited = flush_env | {"CONSOLIDATOR_MAX_BATCH_SIZE": "1", "CONSOLIDATOR_DEBOUNCE_SECONDS": "0.001",
                           "CONSOLIDATOR_EVENT_TTL_SECONDS": "3600"}
    cli_json(limited, "limits", "set", "WH-1", "--batches", "1", "--per", "3600")
    _ingest(migrated, now, 1, "A", "WH-1", timestamp_ms=now)
    _ingest(migrated, now, 2, "B", "WH-1", timestamp_ms=now)
    _ingest(migrated, now, 3, "G", "WH-9", timestamp_ms=now - 7_200_000)  # over the TTL: a dead letter
    once = cli_json(limited, "flush", "--once")
    assert [b["group_key"] for b in once["published"]] == ["WH-1"]  # the other WH-1 row is throttled for an hour
    assert once["expired"] == 1
    _ingest(migrated, now - 1_700_000, 4, "C", "WH-2")  # hard window (1800 s) in about 100 s
    _ingest(migrated, now - 10_000, 5, "D", "WH-2")
    _ingest(migrated, now - 400_000, 6, "E", "WH-3")  # idle past the debounce (300 s): due now
    _ingest(migrated, now - 100_000, 7, "F", "WH-4")  # idle in about 200 s
    watch_env = flush_env | {"CONSOLIDATOR_DEBOUNCE_SECONDS": "300", "CONSOLIDATOR_HARD_WINDOW_SECONDS": "1800"}

    (line,) = cli(watch_env, "status", "--watch", "--count", "1", "--json").stdout.splitlines()
    document = json.loads(line)
    assert [(g["group_key"], g["reason"]) for g in document["groups"]] == [
        ("WH-3", "idle"), ("WH-2", "hard_window"), ("WH-4", "idle"), ("WH-1", "idle")]
    assert document["groups"][3]["throttled_until_ms"] >= now + 3_500_000
    assert document["pending_groups"] == 4 and document["oldest_pending_age_s"] >= 1_700
    assert sorted((b["group_key"], b["state"]) for b in document["recent_batches"]) == [
        ("WH-1", "SENT"), ("WH-9", "EXPIRED")]
    assert document["dead_batches"] == 0
    assert [(b["group_key"], b["state"], b["member_count"]) for b in document["dead_letters"]] == [("WH-9", "EXPIRED", 1)]

    result = cli(watch_env, "status", "--watch", "--count", "2", "--interval", "0.1")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert sum(line.startswith("--- ") for line in lines) == 2  # one block per refresh, plain lines
    block = lines[:lines.index(next(line for line in lines[1:] if line.startswith("--- ")))]
    pending = [line for line in block if line.startswith("pending ")]
    assert [line.split(":")[0] for line in pending] == ["pending WH-3", "pending WH-2", "pending WH-4", "pending WH-1"]
    assert "due now (idle)" in pending[0]
    assert "hard window in " in pending[1] and "idle in " in pending[2]
    assert "throttled until " in pending[3]
    assert "\x1b" not in result.stdout  # no terminal codes when piped
    assert any(line.startswith("batch ") and "WH-1: SENT" in line for line in block)
    assert any(line.startswith("dead letter ") and "WH-9: expired rows, 1 member(s)" in line for line in block)

    bad = cli(watch_env, "status", "--watch", "--interval", "0")
    assert bad.exit_code == 2 and "0.1" in bad.stderr


def test_watch_stops_cleanly_on_ctrl_c_and_refreshes_in_place_on_a_terminal(env, migrated, monkeypatch):  # noqa: F811
    from consolidator.cli import status_watch

    _ingest(migrated, SystemClock().now_ms() - 400_000, 1, "A", "WH-1")

    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(status_watch.time, "sleep", interrupted)  # Ctrl-C while waiting for the next refresh
    piped = cli(env, "status", "--watch")  # --count 0: until Ctrl-C
    assert piped.exit_code == 0, piped.stderr
    assert sum(line.startswith("--- ") for line in piped.stdout.splitlines()) == 1
    assert "pending WH-1: 1 row(s)" in piped.stdout and piped.stderr == ""

    monkeypatch.setattr(status_watch, "on_terminal", lambda: True)
    monkeypatch.setattr(status_watch.out, "_force_terminal", True)  # rich Live draws as on a terminal
    live = cli(env, "status", "--watch")
    assert live.exit_code == 0, live.stderr
    assert "pending groups (next to flush first)" in live.stdout and "due now (idle)" in live.stdout
    assert "--- " not in live.stdout  # tables refreshed in place, not blocks of lines
