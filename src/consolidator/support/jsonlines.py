"""Crash-atomic JSON-lines files: the file sink and the file dead-letter destination.

Guarantees:
- an entry counts only once its terminating newline is on disk (``append`` fsyncs before it
  returns), so a reader never takes an unterminated tail for an entry;
- a writer killed in the middle of an append leaves at most an unterminated tail; the next
  ``append`` cuts it off before writing, so a later entry is never glued onto a torn one.
  That tail was never confirmed to anyone (its batch is still CLAIMED, its poison record
  still unreported), so it is written again later;
- appends from several processes are serialised by an exclusive ``flock`` on the file.
Complete lines written by an append that did not finish may stay: they are whole entries,
and the at-least-once contract already allows a batch or entry to appear more than once.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable
from pathlib import Path

_TAIL_CHUNK = 64 * 1024


def _complete_length(fd: int, size: int) -> int:
    """Length of the file up to and including its last newline (0 when it has none)."""
    end = size
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        chunk = os.pread(fd, end - start, start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def append(path: Path, lines: Iterable[bytes]) -> None:
    """Append ``lines`` (each without its newline) and fsync; raises ``OSError`` on failure.
    All or nothing for readers: until the call returns, no reader counts its last line."""
    data = b"".join(line + b"\n" for line in lines)
    if not data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            size = _complete_length(fd, size)  # a torn tail of an append that never finished
            os.ftruncate(fd, size)
        view = memoryview(data)
        offset = size
        while view:
            written = os.pwrite(fd, view, offset)
            offset += written
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)  # releases the lock


def read(path: Path) -> list[dict]:
    """Every complete entry, in file order; an unterminated tail (an append in progress or a
    torn one) is not an entry and is skipped. A missing file has no entries."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    complete = data[: data.rfind(b"\n") + 1]
    return [json.loads(line) for line in complete.splitlines() if line.strip()]
