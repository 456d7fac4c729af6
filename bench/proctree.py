"""CPU seconds of this process's tree: shared by the benchmarks and by ``flink_session.py``,
which runs in Flink's own venv (standard library only here)."""

from __future__ import annotations

import os
from pathlib import Path


def tree_cpu_seconds() -> float:
    """CPU time (user + system) of this process and every process under it (a local JVM, Python
    workers), reaped children included. Linux only; 0.0 elsewhere."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc/self/stat").exists() else ():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except (OSError, ValueError):
            continue
        fields = text[text.rindex(")") + 2:].split()
        stats[int(entry.name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick)
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo.extend(children.get(pid, ()))
    return total
