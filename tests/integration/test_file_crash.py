"""Crash-atomic local outputs: a real writer process SIGKILLed in the middle of a large write
leaves no torn entry any reader sees, and the next write is never glued onto the torn tail."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from consolidator.sinks import OutgoingBatch
from consolidator.sinks.deadletter import FileDeadLetter
from consolidator.sinks.file import FileSink

LINE_BYTES = 1 << 20  # one entry of about 1 MiB, 16 per write: the kill lands mid-write
# a dead-letter entry is bounded to fit SQS (256 KiB): 80 of 200 KB make a 16 MB write
DEAD_LETTER_DETAIL = 200_000

WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path

    kind, path = sys.argv[1], Path(sys.argv[2])
    pad = "x" * int(sys.argv[3])
    if kind == "sink":
        from consolidator.sinks import OutgoingBatch
        from consolidator.sinks.file import FileSink

        body = ('{"pad":"%s"}' % pad).encode()
        sink = FileSink(path, max_message_bytes=len(body))  # lines over the default limit: long writes
        while True:
            assert sink.publish([OutgoingBatch("a" * 32, "WH-1", body)] * 16) == {}
    else:
        from consolidator.sinks.deadletter import FileDeadLetter

        dead_letter = FileDeadLetter(path)
        while True:
            assert dead_letter.send([{"kind": "poison", "detail": pad}] * 80) == set()
""")


@pytest.fixture
def workdir(tmp_path) -> Iterator[Path]:
    """A directory in memory when the machine has one: fsync is then instant, so the writer
    spends its time in write() and the kill lands in the middle of one."""
    if not Path("/dev/shm").is_dir():
        yield tmp_path
        return
    directory = Path(tempfile.mkdtemp(prefix="consolidator-crash-", dir="/dev/shm"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


def kill_mid_write(kind: str, path: Path, pad: int = LINE_BYTES) -> None:
    """Run a writer and SIGKILL it until it dies with a torn (unterminated) tail on disk."""
    for _ in range(50):
        path.unlink(missing_ok=True)
        child = subprocess.Popen([sys.executable, "-c", WRITER, kind, str(path), str(pad)])
        try:
            deadline = time.monotonic() + 30
            while (path.stat().st_size if path.exists() else 0) < 2 * LINE_BYTES:
                assert child.poll() is None, "the writer died on its own"
                assert time.monotonic() < deadline, "the writer wrote nothing"
                time.sleep(0.001)
            time.sleep(random.uniform(0, 0.02))
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        with path.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                return
    pytest.fail("no kill landed in the middle of a write in 50 tries")


def strict_lines(path: Path) -> list[dict]:
    """What a downstream reader of JSON lines does: every newline-terminated line is JSON."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), "the file ends in an unterminated line"
    return [json.loads(line) for line in data.splitlines()]


def test_file_sink_killed_mid_write_never_shows_a_torn_batch(workdir):
    path = workdir / "batches.jsonl"
    kill_mid_write("sink", path)
    sink = FileSink(path)
    before = sink.read()  # a reader during the outage sees whole messages only
    assert before and all(set(m) == {"pad"} for m in before)

    assert sink.publish([OutgoingBatch("b" * 32, "WH-2", b'{"batch_id":"next"}')]) == {}
    lines = strict_lines(path)
    assert lines[-1] == {"batch_id": "next"}, "the next batch is a line of its own"
    assert lines[:-1] == before, "only the torn tail was cut; whole lines stay"
    assert sink.read() == lines


def test_file_dead_letter_killed_mid_write_never_shows_a_torn_entry(workdir):
    path = workdir / "dead-letter.jsonl"
    kill_mid_write("dead_letter", path, DEAD_LETTER_DETAIL)
    dead_letter = FileDeadLetter(path)
    before = dead_letter.read()
    assert before and all(e["kind"] == "poison" and len(e["detail"]) == DEAD_LETTER_DETAIL for e in before)

    assert dead_letter.send([{"kind": "poison", "detail": "next"}]) == set()
    lines = strict_lines(path)
    assert lines[-1] == {"kind": "poison", "detail": "next"}
    assert lines[:-1] == before
    assert dead_letter.read() == lines
