"""``consolidator batch find``: which batch carried an event, by position or item id, against
the real database (typer's runner)."""

from __future__ import annotations

from support import record
from test_cli import NOW, cli, cli_json, env  # noqa: F401 (env is a fixture)

from consolidator.rules.clock import ManualClock
from consolidator.rules.events import FieldNames, decode
from consolidator.rules.policy import Policy
from consolidator.services.flush import FlushService
from consolidator.sinks.deadletter import FileDeadLetter
from consolidator.sinks.file import FileSink


def _ingest(store, at_ms: int, *offsets_orders_locations) -> None:
    events = [decode(record(offset, order=order, location=location, timestamp_ms=NOW), FieldNames(), 1 << 20)
              for offset, order, location in offsets_orders_locations]
    store.ingest(events, at_ms)


def test_batch_find_by_position_and_item(env, store, tmp_path):  # noqa: F811
    clock = ManualClock(NOW - 600_000)
    _ingest(store, clock.now_ms(), (1, "A1", "WH-1"), (2, "A2", "WH-1"), (3, "A1", "WH-1"))  # 3 replaces 1
    clock.set(NOW)
    sink = FileSink(tmp_path / "out.jsonl")
    FlushService(store=store, sink=sink, dead_letter=FileDeadLetter(tmp_path / "dead.jsonl"), clock=clock,
                 policy=Policy(debounce_ms=1000, hard_window_ms=1000)).tick()
    (published,) = sink.read()
    _ingest(store, NOW, (4, "B1", "WH-2"))  # still pending

    found = cli_json(env, "batch", "find", "--position", "orders:0:3")
    assert found["answer"] == "batch"
    (row,) = found["rows"]
    assert (row["batch_id"], row["batch_state"], row["item_id"], row["merged_events"]) == (
        published["batch_id"], "SENT", "A1", 2)
    assert row["published_at_ms"] == NOW
    human = cli(env, "batch", "find", "--position", "orders:0:2")
    assert human.exit_code == 0 and published["batch_id"] in human.stdout and "published" in human.stdout

    pending = cli_json(env, "batch", "find", "--position", "orders:0:4", exit_code=1)
    assert pending["answer"] == "pending" and pending["rows"][0]["batch_id"] is None
    assert "still pending" in cli(env, "batch", "find", "--position", "orders:0:4").stdout

    replaced = cli(env, "batch", "find", "--position", "orders:0:1")  # a newer event of A1 replaced it
    assert replaced.exit_code == 1 and "--item" in replaced.stdout and "replaced it" in replaced.stdout
    ahead = cli_json(env, "batch", "find", "--position", "orders:0:99", exit_code=1)
    assert ahead["answer"] == "not_found" and "not ingested yet" in ahead["message"]
    assert "nothing of orders:7" in cli(env, "batch", "find", "--position", "orders:7:1").stdout

    by_item = cli_json(env, "batch", "find", "--item", "A1")
    assert [(r["batch_id"], r["newest_position"]["offset"]) for r in by_item["rows"]] == [(published["batch_id"], 3)]
    assert cli_json(env, "batch", "find", "--item", "nobody", exit_code=1)["answer"] == "not_found"

    for bad in (["--position", "orders:x:1"], ["--position", "no topic:0:1"], [], ["--item", "A1", "--position", "t:0:1"]):
        result = cli(env, "batch", "find", *bad)
        assert result.exit_code == 2, (bad, result.stdout, result.stderr)
