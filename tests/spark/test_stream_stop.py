"""``consolidator spark stream`` stops cleanly: on SIGTERM to its process, or Ctrl-C (SIGINT to
its whole process group, the JVM included), after its current micro-batch, exit 0, with one line
naming the offsets it stopped at, and no error or JVM trace.

The line names its source in words, whatever Spark calls it: on the Python Kafka source (what
local runs use) Spark's description is a JVM object's name
(``...PythonMicroBatchStreamWithAdmissionControl@721e42bc``). Each run is a Spark process of its
own (about 20 s), so the two signals go to the two sources: SIGTERM to a stream of the Kafka of
``consolidator kafka serve``, Ctrl-C to a stream of a directory of record files."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from test_streaming import now_ms, order, read_lines

pytestmark = pytest.mark.spark

CLI = [sys.executable, "-c", "from consolidator.cli import app; app(prog_name='consolidator')"]
# Well above an empty micro-batch's time (0.6-1.5 s on a loaded 2-core machine): with 1 s, the
# micro-batches ran back to back there and a stop waited up to 9 s for the gap between two of them
TRIGGER_MS = "3000"
JVM_OBJECT = re.compile(r"\b[a-z]+(\.[A-Za-z$_]+)+@[0-9a-f]{4,}\b")  # Object.toString(): class@hash
ORDERS = [order("WH-1", f"o{o}").decode() for o in range(3)]


@contextlib.contextmanager
def kafka_source(tmp_path, env):
    """The stream's source options for the Kafka of ``consolidator kafka serve``, holding
    :data:`ORDERS` in topic ``orders`` (produced by ``consolidator kafka produce``)."""
    server = subprocess.Popen([*CLI, "kafka", "serve", "--brokers", "1"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
    try:
        bootstrap = server.stdout.readline().strip()
        assert bootstrap, server.communicate(timeout=10)
        events = tmp_path / "orders.jsonl"
        events.write_text("".join(line + "\n" for line in ORDERS))
        produced = subprocess.run([*CLI, "kafka", "produce", "--bootstrap-servers", bootstrap, "--topic", "orders",
                                   str(events)], capture_output=True, text=True, timeout=60, env=env, check=False)
        assert produced.returncode == 0, produced.stderr
        yield ["--bootstrap-servers", bootstrap, "--topic", "orders", "--source", "python"]
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()


@contextlib.contextmanager
def file_source(tmp_path, _env):
    """The stream's source options for a directory holding one file of :data:`ORDERS`."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    rows = [{"topic": "orders", "partition": 0, "offset": o, "timestamp": now_ms(), "key": "WH-1", "value": value}
            for o, value in enumerate(ORDERS)]
    (inbox / "first.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    yield ["--input", str(inbox)]


def names_the_topic(stopped: str) -> None:
    named = re.search(r"offsets topic orders: (\{.*\}) \(committed to the checkpoint", stopped)
    assert named, stopped
    assert sum(json.loads(named[1])["orders"].values()) == len(ORDERS)  # every record produced, read
    assert not JVM_OBJECT.search(stopped), stopped


def names_the_files(stopped: str) -> None:
    assert re.search(r"offsets files in \S+/inbox: \{\"logOffset\": 0\} \(committed to the checkpoint", stopped), \
        stopped


@pytest.mark.parametrize(("how", "source", "names"), [("SIGTERM", kafka_source, names_the_topic),
                                                       ("Ctrl-C", file_source, names_the_files)],
                         ids=["SIGTERM-kafka", "Ctrl-C-files"])
def test_stream_stops_after_its_micro_batch_and_names_the_offsets(tmp_path, how, source, names):
    out = tmp_path / "batches.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONSOLIDATOR_")} | {
        "PYSPARK_PYTHON": sys.executable}
    with source(tmp_path, env) as source_options:
        # a trigger well above a micro-batch's time leaves a gap between micro-batches for the stop
        # (back to back, the stop can fall on the next one's planning: see consolidator.spark.stop;
        # and it waits for a gap, which back-to-back micro-batches seldom leave)
        process = subprocess.Popen(
            [*CLI, "spark", "stream", *source_options, "--checkpoint", str(tmp_path / "ckpt"),
             "--sink-url", f"file://{out}", "--dead-letter-url", f"file://{tmp_path / 'dead.jsonl'}",
             "--trigger-ms", TRIGGER_MS, "--debounce-seconds", "0.5"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        try:
            deadline = time.monotonic() + 400
            while not read_lines(out) and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert read_lines(out), process.communicate(timeout=60)
            if how == "SIGTERM":
                process.send_signal(signal.SIGTERM)  # the process only, as `kill PID` does
            else:
                os.killpg(process.pid, signal.SIGINT)  # the terminal's Ctrl-C: every process of the group
            _, stderr = process.communicate(timeout=300)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    name = "SIGTERM" if how == "SIGTERM" else "SIGINT"
    stopped = [line for line in stderr.splitlines() if line.startswith("stream stopped")]
    assert process.returncode == 0, stderr[-3000:]
    assert len(stopped) == 1, stderr[-3000:]
    assert stopped[0].startswith(f"stream stopped ({name}) after micro-batch "), stopped[0]
    names(stopped[0])
    for mark in ("Traceback", "FOREACH_BATCH", "StackOverflowError", "Exception", "py4j.clientserver"):
        assert mark not in stderr, (mark, stderr[-3000:])
    assert [sorted(b["item_ids"]) for b in read_lines(out)] == [["o0", "o1", "o2"]]
