"""``consolidator spark stream`` stops cleanly: on SIGTERM to its process,
or Ctrl-C (SIGINT to its whole process group, the JVM included), after its current micro-batch,
exit 0, with one line naming the offsets it stopped at, and no error or JVM trace."""

from __future__ import annotations

import json
import os
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


@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C"])
def test_stream_stops_after_its_micro_batch_and_names_the_offsets(tmp_path, how):
    inbox, out = tmp_path / "inbox", tmp_path / "batches.jsonl"
    inbox.mkdir()
    rows = [{"topic": "orders", "partition": 0, "offset": o, "timestamp": now_ms(), "key": "WH-1",
             "value": order("WH-1", f"o{o}").decode()} for o in range(3)]
    (inbox / "first.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONSOLIDATOR_")} | {
        "PYSPARK_PYTHON": sys.executable}
    # a trigger well above a micro-batch's time leaves a gap between micro-batches for the stop
    # (back to back, the stop can fall on the next one's planning: see consolidator.spark.stop;
    # and it waits for a gap, which back-to-back micro-batches seldom leave)
    process = subprocess.Popen(
        [*CLI, "spark", "stream", "--input", str(inbox), "--checkpoint", str(tmp_path / "ckpt"),
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
    assert stopped[0].startswith(f"stream stopped ({name}) after micro-batch ") and '"logOffset": 0' in stopped[0]
    for mark in ("Traceback", "FOREACH_BATCH", "StackOverflowError", "Exception", "py4j.clientserver"):
        assert mark not in stderr, (mark, stderr[-3000:])
    assert [sorted(b["item_ids"]) for b in read_lines(out)] == [["o0", "o1", "o2"]]
