"""The line ``consolidator spark stream`` ends with names its source in words, whatever Spark
calls it: on the Python Kafka source (what local runs use) Spark's description is a JVM object's
name (``...PythonMicroBatchStreamWithAdmissionControl@721e42bc``)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from test_stream_stop import TRIGGER_MS
from test_streaming import read_lines

pytestmark = pytest.mark.spark

CLI = [sys.executable, "-c", "from consolidator.cli import app; app(prog_name='consolidator')"]
JVM_OBJECT = re.compile(r"\b[a-z]+(\.[A-Za-z$_]+)+@[0-9a-f]{4,}\b")  # Object.toString(): class@hash


def test_the_stop_line_names_the_topic_and_its_offsets(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONSOLIDATOR_")} | {
        "PYSPARK_PYTHON": sys.executable}
    server = subprocess.Popen([*CLI, "kafka", "serve", "--brokers", "1"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
    stream = None
    try:
        bootstrap = server.stdout.readline().strip()
        assert bootstrap, server.communicate(timeout=10)
        events = tmp_path / "orders.jsonl"
        events.write_text(json.dumps({"location_id": "WH-1", "order_id": "A1",
                                      "items": [{"sku": "S", "quantity": 1}]}) + "\n")
        produced = subprocess.run([*CLI, "kafka", "produce", "--bootstrap-servers", bootstrap, "--topic", "orders",
                                   str(events)], capture_output=True, text=True, timeout=60, env=env, check=False)
        assert produced.returncode == 0, produced.stderr
        out = tmp_path / "batches.jsonl"
        stream = subprocess.Popen(
            [*CLI, "spark", "stream", "--bootstrap-servers", bootstrap, "--topic", "orders", "--source", "python",
             "--checkpoint", str(tmp_path / "ckpt"), "--sink-url", f"file://{out}",
             "--dead-letter-url", f"file://{tmp_path / 'dead.jsonl'}", "--trigger-ms", TRIGGER_MS,
             "--debounce-seconds", "0.5"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        deadline = time.monotonic() + 400
        while not read_lines(out) and stream.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert read_lines(out), stream.communicate(timeout=60)
        stream.send_signal(signal.SIGTERM)
        _, stderr = stream.communicate(timeout=300)
    finally:
        for process in (stream, server):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.communicate()
    assert stream.returncode == 0, stderr[-3000:]
    (stopped,) = [line for line in stderr.splitlines() if line.startswith("stream stopped")]
    named = re.search(r"offsets topic orders: (\{.*\}) \(committed to the checkpoint", stopped)
    assert named, stopped
    assert sum(json.loads(named[1])["orders"].values()) == 1  # the one record produced, read
    assert not JVM_OBJECT.search(stopped), stopped
