"""``consolidator batch status | ack | list --incomplete`` against the real database."""

from __future__ import annotations

import json
import re

from test_cli import NOW, cli, cli_json, env  # noqa: F401 (env is a fixture)

from consolidator.store.completion import SealedBatch

BATCH = "0123456789abcdef0123456789abcdef"


def test_batch_status_ack_and_list_incomplete(env, store, tmp_path):  # noqa: F811
    completions = tmp_path / "completions.jsonl"
    env = env | {"CONSOLIDATOR_COMPLETION_SINK_URL": f"file://{completions}",
                 "CONSOLIDATOR_COMPLETION_DEADLINE_SECONDS": "3600"}
    store.seal([SealedBatch(BATCH, "WH-1", ("A001", "A002", "A003"))], NOW - 7_200_000)

    status = cli_json(env, "batch", "status", BATCH)
    assert (status["members"], status["acknowledged"], status["complete"], status["state"]) == (3, 0, False, None)
    assert status["age_s"] >= 7200

    acked = cli_json(env, "batch", "ack", BATCH, "--item", "A001", "--index", "2")
    assert (acked["newly_acknowledged"], acked["duplicates"], acked["completed_now"]) == (2, 0, False)
    overdue = cli_json(env, "batch", "list", "--incomplete")["batches"]
    assert [(b["batch_id"], b["acknowledged"], b["members"]) for b in overdue] == [(BATCH, 2, 3)]
    assert len(cli_json(env, "batch", "list", "--incomplete", "--limit", "1")["batches"]) == 1

    refused = cli(env, "batch", "ack", BATCH, "--index", "9", "--index", "0")
    assert refused.exit_code == 1 and "unknown_member: 9" in refused.stderr

    done = cli(env, "batch", "ack", BATCH, "--item", "A002")
    assert done.exit_code == 0 and "batch complete" in done.stdout
    assert [json.loads(line)["batch_id"] for line in completions.read_text().splitlines()] == [BATCH]
    assert cli_json(env, "batch", "list", "--incomplete")["batches"] == []
    assert cli_json(env, "batch", "status", BATCH)["complete"] is True

    unknown = cli(env, "batch", "status", "f" * 32)
    assert unknown.exit_code == 1 and "not tracked" in unknown.stderr


def test_batch_show_and_list_any_batch_with_its_members_and_filters(env, store, tmp_path):  # noqa: F811
    """``batch show`` and ``batch list``: untracked batches too, members with item id,
    position and the newest event their row keeps; filters by state, group and claim time."""
    import orjson

    from consolidator.rules.clock import ManualClock
    from consolidator.rules.events import FieldNames, KafkaRecord, decode
    from consolidator.rules.policy import Policy
    from consolidator.rules.shape import Shape, parse_outputs
    from consolidator.services.flush import FlushService
    from consolidator.sinks.deadletter import FileDeadLetter
    from consolidator.sinks.file import FileSink

    shape = Shape(parse_outputs('[{"name": "n", "op": "count"}]'), payload_paths=(("page",),))
    names = FieldNames(group_key="tenant", item_id="user", shape=shape)
    events = [decode(KafkaRecord("clicks", 0, i, NOW, None, orjson.dumps(
        {"tenant": f"T{i % 2}", "user": f"u{i}", "page": f"/p{i}", "secret": "kept out"})), names, 1 << 20)
        for i in range(5)]
    clock = ManualClock(NOW - 600_000)
    store.ingest(events, clock.now_ms())
    clock.set(NOW)
    sink = FileSink(tmp_path / "out.jsonl")
    FlushService(store=store, sink=sink, dead_letter=FileDeadLetter(tmp_path / "dead.jsonl"), clock=clock,
                 policy=Policy(debounce_ms=1000, hard_window_ms=1000), names=names).tick()
    published = {m["group_key"]: m for m in sink.read()}
    assert set(published) == {"T0", "T1"}

    listed = cli_json(env, "batch", "list")["batches"]
    assert sorted((b["group_key"], b["state"], b["member_count"], b["tracked"]) for b in listed) == [
        ("T0", "SENT", 3, False), ("T1", "SENT", 2, False)]
    assert [b["group_key"] for b in cli_json(env, "batch", "list", "--group", "T1")["batches"]] == ["T1"]
    assert cli_json(env, "batch", "list", "--state", "dead")["batches"] == []
    assert len(cli_json(env, "batch", "list", "--since", "1h", "--limit", "1")["batches"]) == 1
    assert cli_json(env, "batch", "list", "--since", "2099-01-01T00:00:00Z")["batches"] == []

    shown = cli_json(env, "batch", "show", published["T0"]["batch_id"])
    assert (shown["state"], shown["reason"], shown["attempts"], shown["tracked"]) == ("SENT", "hard_window", 1, False)
    assert [(m["item_id"], m["offset"], m["event"]) for m in shown["members"]] == [
        ("u0", 0, {"page": "/p0"}), ("u2", 2, {"page": "/p2"}), ("u4", 4, {"page": "/p4"})]
    assert [m["item_id"] for m in published["T0"]["members"]] == ["u0", "u2", "u4"]
    table = cli(env, "batch", "show", published["T1"]["batch_id"])
    assert table.exit_code == 0 and "u3" in table.stdout and "/p3" in table.stdout
    unknown = cli(env, "batch", "show", "f" * 32)
    assert unknown.exit_code == 1 and "no batch has the id" in unknown.stderr
    bad = cli(env, "batch", "list", "--since", "yesterday")
    assert bad.exit_code == 2 and "30m, 2h, 1d" in bad.stderr


def test_batch_list_accepts_exactly_the_limits_its_help_names(env, store):  # noqa: F811
    """``--help`` names the range of ``--limit``; its ends are accepted and the numbers just past
    them refused with a usage error naming the same range, with and without --incomplete."""
    helped = " ".join(cli(env, "batch", "list", "--help").stdout.split())
    low, high = (int(n.replace(",", "")) for n in re.search(r"batches \(([\d,]+) to ([\d,]+)\)", helped).groups())
    for mode in ([], ["--incomplete"]):
        for accepted in (low, high):
            assert cli(env, "batch", "list", *mode, "--limit", str(accepted), "--json").exit_code == 0
        for refused in (low - 1, high + 1):
            result = cli(env, "batch", "list", *mode, "--limit", str(refused))
            assert result.exit_code == 2 and f"allowed {low:,} to {high:,}" in " ".join(result.stderr.split())
