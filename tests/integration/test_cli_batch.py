"""``consolidator batch status | ack | list --incomplete`` against the real database."""

from __future__ import annotations

import json

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
    assert cli_json(env, "batch", "list", "--incomplete", "--limit", "0")["batches"] == []

    refused = cli(env, "batch", "ack", BATCH, "--index", "9", "--index", "0")
    assert refused.exit_code == 1 and "unknown_member: 9" in refused.stderr

    done = cli(env, "batch", "ack", BATCH, "--item", "A002")
    assert done.exit_code == 0 and "batch complete" in done.stdout
    assert [json.loads(line)["batch_id"] for line in completions.read_text().splitlines()] == [BATCH]
    assert cli_json(env, "batch", "list", "--incomplete")["batches"] == []
    assert cli_json(env, "batch", "status", BATCH)["complete"] is True

    unknown = cli(env, "batch", "status", "f" * 32)
    assert unknown.exit_code == 1 and "not tracked" in unknown.stderr
