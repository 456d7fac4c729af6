"""The streaming job on its local sources: the Kafka of ``consolidator kafka serve``
(a separate process, fed by ``consolidator kafka produce``) and a directory of record files."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from test_streaming import now_ms, order, read_lines, wait_for

from consolidator.rules.policy import Policy
from consolidator.spark.streaming import StreamConfig, start

pytestmark = pytest.mark.spark

CLI = [sys.executable, "-c", "from consolidator.cli import app; app(prog_name='consolidator')"]
POLICY = Policy(debounce_ms=500, hard_window_ms=600_000, max_batch_size=100)


def test_stream_reads_the_served_kafka_that_a_file_was_produced_to(spark, tmp_path):
    server = subprocess.Popen([*CLI, "kafka", "serve"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        bootstrap = server.stdout.readline().strip()
        assert bootstrap, server.communicate(timeout=10)
        events = tmp_path / "orders.jsonl"
        events.write_text("".join(order(g, f"{g}{i}").decode() + "\n" for g in ("WH-1", "WH-2") for i in range(3)))
        produced = subprocess.run([*CLI, "kafka", "produce", "--bootstrap-servers", bootstrap, "--topic", "orders",
                                   str(events)], check=False, capture_output=True, text=True, timeout=60)
        assert produced.returncode == 0, produced.stderr
        out = tmp_path / "batches.jsonl"
        config = StreamConfig(bootstrap, "orders", f"file://{out}", f"file://{tmp_path / 'dead.jsonl'}",
                              str(tmp_path / "ckpt"), policy=POLICY, trigger_ms=250, source="python")
        query = start(spark, config)
        try:
            batches = wait_for(lambda: (b := read_lines(out)) and len(b) >= 2 and b, query, timeout_s=400)
        finally:
            query.stop()
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)
    assert sorted((b["group_key"], sorted(b["item_ids"])) for b in batches) == [
        ("WH-1", ["WH-10", "WH-11", "WH-12"]), ("WH-2", ["WH-20", "WH-21", "WH-22"])]
    assert server.returncode == 0


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_stream_reads_record_files_as_they_appear_in_a_directory(spark, tmp_path, fmt):
    inbox, out = tmp_path / "inbox", tmp_path / "batches.jsonl"
    inbox.mkdir()

    def drop(name: str, offsets: range, group: str) -> None:
        rows = [{"topic": "orders", "partition": 0, "offset": o, "timestamp": now_ms(), "key": group,
                 "value": order(group, f"o{o}").decode()} for o in offsets]
        staged = tmp_path / f"{name}.{fmt}"
        if fmt == "json":
            staged.write_text("".join(json.dumps(r) + "\n" for r in rows))
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(rows), staged)
        staged.rename(inbox / staged.name)  # files appear whole

    drop("first", range(3), "WH-1")
    config = StreamConfig("", "", f"file://{out}", f"file://{tmp_path / 'dead.jsonl'}", str(tmp_path / "ckpt"),
                          policy=POLICY, trigger_ms=250, input_path=str(inbox), input_format=fmt)
    query = start(spark, config)
    try:
        wait_for(lambda: read_lines(out), query, timeout_s=400)
        time.sleep(1)
        drop("second", range(3, 5), "WH-2")
        batches = wait_for(lambda: (b := read_lines(out)) and len(b) >= 2 and b, query, timeout_s=400)
    finally:
        query.stop()
    assert [(b["group_key"], sorted(m["offset"] for m in b["members"])) for b in batches] == [
        ("WH-1", [0, 1, 2]), ("WH-2", [3, 4])]


def test_stream_takes_kafka_or_an_input_directory_checked_before_spark_starts(tmp_path):
    from typer.testing import CliRunner

    from consolidator.cli.spark.commands import spark_app

    common = ["stream", "--sink-url", f"file://{tmp_path / 'b.jsonl'}", "--dead-letter-url",
              f"file://{tmp_path / 'd.jsonl'}", "--checkpoint", str(tmp_path / "ckpt")]
    runner = CliRunner()
    neither = runner.invoke(spark_app, common)
    assert neither.exit_code == 2 and "--input DIR (files)" in neither.output, neither.output
    both = runner.invoke(spark_app, [*common, "--input", str(tmp_path), "--bootstrap-servers", "b:9092", "--topic", "t"])
    assert both.exit_code == 2 and "not both" in both.output, both.output
    missing = runner.invoke(spark_app, [*common, "--input", "no-such-dir"])
    assert missing.exit_code == 2 and "is not a directory" in missing.output, missing.output
    bad_format = runner.invoke(spark_app, [*common, "--input", str(tmp_path), "--format", "csv"])
    assert bad_format.exit_code == 2 and "json or parquet" in bad_format.output, bad_format.output
