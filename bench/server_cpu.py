"""CPU time the database server spends, read from /proc around a timed phase.

Two readings, both only when the server runs on this machine (otherwise None):
- ``process``: utime + stime of the whole mariadbd/mysqld process (every thread, background
  flushing and purge included): the figure a capacity model needs, but on a shared server it
  also counts other clients' work;
- ``thread``: run time of the server thread serving one connection (``/proc/<pid>/task/<tid>/
  schedstat``, nanoseconds): only this client's statements, without background work.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pymysql

_NO_SUCH_TABLE_OR_COLUMN = (1054, 1109, 1146)
_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuSample:
    process_s: float | None
    threads_s: float | None


def server_pid(cur) -> int | None:
    """The server's pid from its pid file, if it is a local mariadbd/mysqld we can read."""
    cur.execute("SELECT @@pid_file AS f")
    row = cur.fetchone()
    path = Path(row["f"] if isinstance(row, dict) else row[0])
    try:
        pid = int(path.read_text().split()[0])
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError, IndexError):
        return None
    return pid if comm in ("mariadbd", "mysqld") else None


def connection_thread(cur) -> int | None:
    """OS thread id of the server thread serving this connection (MariaDB, then MySQL 8)."""
    for statement in ("SELECT TID AS t FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()",
                      "SELECT THREAD_OS_ID AS t FROM performance_schema.threads WHERE PROCESSLIST_ID = CONNECTION_ID()"):
        try:
            cur.execute(statement)
        except pymysql.err.MySQLError as exc:
            if exc.args[0] not in _NO_SUCH_TABLE_OR_COLUMN:
                raise
            continue  # the other server kind's statement: try the next
        row = cur.fetchone()
        value = row and (row["t"] if isinstance(row, dict) else row[0])
        if value:
            return int(value)
    return None


class ServerCpu:
    """Samples the server's CPU; ``watch`` adds a connection whose thread is counted."""

    def __init__(self, cur) -> None:
        self.pid = server_pid(cur)
        self.threads: set[int] = set()

    def watch(self, cur) -> None:
        if self.pid is not None and (tid := connection_thread(cur)) is not None:
            self.threads.add(tid)

    def sample(self) -> CpuSample:
        if self.pid is None:
            return CpuSample(None, None)
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        process = (int(fields[11]) + int(fields[12])) * _TICK_S
        threads = 0.0
        for tid in self.threads:
            try:
                threads += int(Path(f"/proc/{self.pid}/task/{tid}/schedstat").read_text().split()[0]) / 1e9
            except OSError:
                return CpuSample(process, None)  # the thread ended (reconnect): no thread figure
        return CpuSample(process, threads if self.threads else None)


def per_record_us(before: CpuSample, after: CpuSample, records: int) -> dict[str, float | None]:
    """Microseconds of server CPU per record between two samples."""
    def us(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else round((b - a) * 1e6 / records, 2)

    return {"process": us(before.process_s, after.process_s), "thread": us(before.threads_s, after.threads_s)}
