"""A MariaDB server of one test module: its own port, data directory and process, so a test can
configure TLS or skip fsyncs without touching the shared server. Only its own pid is stopped.

Imported as ``local_mariadb`` (like ``support``)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pymysql

MARIADBD = shutil.which("mariadbd") or "/usr/sbin/mariadbd"


def available() -> bool:
    return Path(MARIADBD).exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def mariadb(*options: str, bind: str = "127.0.0.1", in_memory: bool = False) -> Iterator[int]:
    """Start ``mariadbd`` with ``options`` on a free port (no grant tables: root, no password);
    yields the port. ``in_memory`` puts the data directory on /dev/shm when there is one."""
    parent = "/dev/shm" if in_memory and Path("/dev/shm").is_dir() else None
    directory = Path(tempfile.mkdtemp(prefix="consolidator-mariadb-", dir=parent))
    (directory / "data").mkdir()
    port = free_port()
    log = (directory / "server.log").open("w")
    server = subprocess.Popen(
        [MARIADBD, "--no-defaults", "--user=root", f"--datadir={directory / 'data'}", f"--port={port}",
         f"--bind-address={bind}", f"--socket={directory / 'sock'}", f"--pid-file={directory / 'pid'}",
         "--skip-grant-tables", "--skip-log-bin", "--innodb-buffer-pool-size=32M", *options],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                pymysql.connect(host="127.0.0.1", port=port, user="root", connect_timeout=1).close()
                break
            except pymysql.err.OperationalError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError((directory / "server.log").read_text()[-2000:]) from None
                time.sleep(0.2)
        yield port
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
        log.close()
        shutil.rmtree(directory, ignore_errors=True)
