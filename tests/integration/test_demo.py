"""The local end-to-end demo in a reduced size (mock Kafka, real MariaDB and Redis, the real
handlers), and proof that its exit code follows the invariant check."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pymysql
import pytest
from support import MYSQL_HOST, MYSQL_PASSWORD, MYSQL_PORT, MYSQL_USER
from typer.testing import CliRunner

from consolidator.cli import app
from consolidator.demo import runner as demo_runner
from consolidator.demo.check import OutBatch, Produced, check

SMALL = ["--warehouses", "4", "--orders", "150", "--poison", "3", "--bursts", "3"]
REDIS_DB14 = "redis://127.0.0.1:6379/14"  # not the flush tests' db 15: no shared lock


@pytest.fixture
def demo_args():
    name = f"consolidator_demo_test_{uuid.uuid4().hex[:8]}"
    server = f"mysql://{MYSQL_USER}:{MYSQL_PASSWORD}@{MYSQL_HOST}:{MYSQL_PORT}/"
    yield [*SMALL, "--database-url", server, "--database-name", name, "--redis-url", REDIS_DB14, "--json"]
    with pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user=MYSQL_USER, password=MYSQL_PASSWORD,
                         autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name}")


def run(args: list[str], keep_workdir: bool = False):
    result = CliRunner().invoke(app, ["demo", *args])
    summary = json.loads(result.stdout) if result.stdout.strip().startswith("{") else None
    if summary and summary.get("workdir") and not keep_workdir:
        shutil.rmtree(summary["workdir"], ignore_errors=True)
    return result, summary


def test_demo_reduced_size_passes_its_invariant_check_and_shows_its_work(demo_args):
    """One demo run (about 11 s) for both: it passes its invariant check; and it shows its work
    and keeps stdout for JSON: one sample batch, every batch in a kept file that the output
    names; with --json stdout is exactly the summary (logs, even --verbose ones, on stderr);
    each function's log lines carry its own service and function name although both run in one
    process. --verbose only raises the functions' log level (WARNING, not CRITICAL)."""
    result, summary = run([*demo_args, "--verbose"], keep_workdir=True)
    try:
        assert result.exit_code == 0, (result.stdout, result.stderr)
        assert summary["passed"] and summary["problems"] == []
        assert summary["messages_in"] == summary["valid_events"] + summary["poison_messages"]
        assert summary["distinct_items"] == 150 and summary["poison_messages"] == 3
        assert summary["dead_lettered"] == 3
        assert 1 <= summary["batches_out"] < summary["valid_events"]
        assert summary["compaction_ratio"] > 1
        assert summary["batch_item_failures"] >= 1 and summary["partition_rereads"] >= 1  # dead-letter outage
        assert summary["redelivered_invocations"] >= 0 and summary["flush_ticks"] >= 1
        assert summary["elapsed_s"] < 180
        assert "invariant check passed" in result.stderr

        assert json.loads(result.stdout) == summary  # the whole of stdout is one JSON document
        lines = Path(summary["batches_file"]).read_text().splitlines()
        batches = [json.loads(line) for line in lines]
        assert len(batches) == summary["batch_deliveries"]
        assert summary["sample_batch"] in batches
        assert f"every batch is in {summary['batches_file']}" in result.stderr
        assert f"batch_id: \"{summary['sample_batch']['batch_id']}\"" in result.stderr
        assert Path(summary["dead_letter_file"]).is_file()
        logs = [json.loads(line) for line in result.stderr.splitlines() if line.startswith('{"level"')]
        ingest_logs = [entry for entry in logs if entry["name"] == "consolidator.services.ingest"]
        assert ingest_logs, "the dead-letter outage logs from the ingest service"
        for entry in logs:
            function = {"consolidator.services.ingest": "ingest", "consolidator.services.flush": "flush"}.get(
                entry["name"])
            if function:
                assert entry["service"] == f"consolidator-{function}", entry
                assert entry["function_name"] == f"consolidator-{function}", entry
    finally:
        if summary:
            shutil.rmtree(summary["workdir"], ignore_errors=True)


def test_demo_exits_non_zero_when_a_batch_goes_missing(demo_args, monkeypatch):
    real_read_output = demo_runner.read_output

    def lose_one_batch(bootstrap: str, *args, **kwargs) -> list[OutBatch]:
        batches = real_read_output(bootstrap, *args, **kwargs)
        assert batches, "the demo published nothing"
        return batches[1:]

    monkeypatch.setattr(demo_runner, "read_output", lose_one_batch)
    # One burst: the pauses between bursts (seconds) matter to the check's other rules, not to
    # whether its verdict sets the exit code
    result, summary = run([*demo_args, "--bursts", "1"])
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert not summary["passed"]
    assert any("in no batch" in p for p in summary["problems"])
    assert "invariant check FAILED" in result.stderr


def _batch(batch_id: str, offsets: list[int], group: str = "WH-1") -> OutBatch:
    return OutBatch({"batch_id": batch_id, "group_key": group, "event_count": len(offsets),
                     "members": [{"topic": "orders", "partition": 0, "offset": o} for o in offsets],
                     "flush_reason": "idle"}, 1_000)


def test_check_enforces_the_latency_bound_from_first_ingest():
    produced = [Produced(("orders", 0, 0), 0, "WH-1", "O0", False)]
    message = {**_batch("a", [0]).message, "first_event_at": "2026-11-18T11:06:40.000Z"}
    first_ingest_ms = 1_795_000_000_000
    on_time = check(produced, [OutBatch(message, first_ingest_ms + 7_000)], [], latency_bound_s=8)
    assert on_time.passed, on_time.problems
    assert on_time.stats["first_ingest_to_output_s_max"] == 7.0
    late = check(produced, [OutBatch(message, first_ingest_ms + 9_000)], [], latency_bound_s=8)
    assert any(p.startswith("T: 1 batches") for p in late.problems), late.problems


def test_check_catches_an_event_under_two_batch_ids_and_coalescing_is_not_loss():
    produced = [Produced(("orders", 0, o), 0, "WH-1", f"O{o % 2}", False) for o in range(3)]
    # O0 at offsets 0 and 2: offset 0 was coalesced into 2, so one member covers both events.
    good = check(produced, [OutBatch({**_batch("a", [1, 2]).message, "event_count": 3}, 1_000)], [])
    assert good.passed, good.problems
    bad = check(produced, [_batch("a", [1, 2]), _batch("b", [2])], [])
    assert any("under two batch ids" in p for p in bad.problems)
    poison = [*produced, Produced(("orders", 0, 3), 0, None, None, True)]
    assert any("poison" in p for p in check(poison, [_batch("a", [0, 1, 2])], []).problems)
