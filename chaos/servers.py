"""Throwaway MariaDB and Redis servers for fault injection: own ports, own data directories.

Only processes started here are ever signalled, by the pid this module got from ``Popen``; the
developer's own services on 3306/6379 are never touched.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pymysql


class ServerError(RuntimeError):
    """A server could not be installed or started; the message carries the tail of its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 15) -> str:
    if not path.exists():
        return f"(no log at {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _which(name: str, *fallbacks: str) -> str:
    for candidate in (name, *fallbacks):
        found = shutil.which(candidate) or (candidate if os.path.isabs(candidate) and os.path.exists(candidate) else None)
        if found:
            return found
    raise ServerError(f"{name} is not installed (scripts/setup.sh installs it)")


class Server:
    """A child server process that can be killed (SIGKILL), paused and started again."""

    name = "server"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self.kills = 0

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    def start(self, timeout_s: float = 30.0) -> None:
        self.process = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"{self.name} exited with {self.process.returncode}:\n{_tail(self.log)}")
            if self.ready():
                return
            time.sleep(0.1)
        self.kill()
        raise ServerError(f"{self.name} did not answer within {timeout_s}s:\n{_tail(self.log)}")

    def kill(self) -> None:
        """SIGKILL, as a crash would: no shutdown, no flush beyond what the server made durable."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
            self.kills += 1
        self.process = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        self.process = None

    def restart_after_kill(self) -> None:
        self.kill()
        self.start()


class MariaDB(Server):
    """A MariaDB with its own data directory, durable settings (flush at every commit) and
    no grant tables (it listens on 127.0.0.1 only and lives as long as the chaos run)."""

    name = "mariadb"

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.datadir = workdir / "mariadb-data"
        self._user = "mysql" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name

    @property
    def url_base(self) -> str:
        return f"mysql://root:@127.0.0.1:{self.port}"

    def install(self) -> None:
        if os.geteuid() == 0:  # mariadbd refuses to run as root: the data belongs to mysql
            shutil.chown(self.workdir, user=self._user)
        result = subprocess.run(
            [_which("mariadb-install-db", "mysql_install_db"), "--no-defaults", f"--datadir={self.datadir}",
             f"--user={self._user}", "--auth-root-authentication-method=normal", "--skip-test-db",
             "--skip-name-resolve"],
            capture_output=True, text=True, check=False,
        )
        if result.returncode != 0:
            raise ServerError(f"mariadb-install-db failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")

    def command(self) -> list[str]:
        return [
            _which("mariadbd", "/usr/sbin/mariadbd"), "--no-defaults", f"--datadir={self.datadir}",
            f"--port={self.port}", "--bind-address=127.0.0.1", f"--socket={self.workdir / 'mariadb.sock'}",
            f"--pid-file={self.workdir / 'mariadb.pid'}", f"--user={self._user}", "--skip-grant-tables",
            f"--log-error={self.log}", "--innodb-buffer-pool-size=64M", "--innodb-flush-log-at-trx-commit=1",
            "--sync-binlog=0", "--max-connections=200", "--skip-name-resolve",
        ]

    def ready(self) -> bool:
        try:
            pymysql.connect(host="127.0.0.1", port=self.port, user="root", connect_timeout=1).close()
            return True
        except pymysql.err.MySQLError:
            return False

    def admin(self, statement: str) -> list[dict]:
        with pymysql.connect(host="127.0.0.1", port=self.port, user="root", autocommit=True,
                             cursorclass=pymysql.cursors.DictCursor) as conn, conn.cursor() as cur:
            cur.execute(statement)
            return list(cur.fetchall())


class Redis(Server):
    """A Redis that keeps nothing on disk (the lock is all it holds)."""

    name = "redis"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        return [_which("redis-server"), "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                "--appendonly", "no", "--logfile", str(self.log), "--dir", str(self.workdir)]

    def ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False
