"""The parent's side of a handler worker: start it, invoke it, kill, pause and resume it by pid."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


class Worker:
    """One warm Lambda container of ``kind`` (ingest or flush), as a child process. An invocation
    that does not answer (killed, or past its time limit) returns None, like a lost response."""

    def __init__(self, kind: str, repo: Path, env: dict[str, str], log: Path) -> None:
        self.kind, self.repo, self.env, self.log = kind, repo, env, log
        self.process: subprocess.Popen | None = None
        self.kills = 0  # by the parent
        self.crashes = 0  # died on its own: a raised error, or a fault hook's SIGKILL
        self.pauses = 0
        self._killed = False
        self.ready = False  # started and answering: a fault injector may hit it now

    def start(self, timeout_s: float = 60.0, attempts: int = 5) -> None:
        """Start the worker and wait for its ready line; a start cut short by our own SIGKILL
        (a fault injector firing while the container boots) is simply tried again."""
        self.ready = False
        for _ in range(attempts):
            self._killed = False
            with self.log.open("ab") as log:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "chaos.workers", self.kind, str(self.repo)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=self.env, cwd=self.repo,
                )
            if self._read_line(timeout_s) is not None:
                self.ready = True
                return
            if not self._killed:
                break
        self.kill()
        tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"{self.kind} worker did not start:\n{tail}")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _read_line(self, timeout_s: float) -> dict | None:
        assert self.process is not None and self.process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout_s):
                return None
        line = self.process.stdout.readline()
        return json.loads(line) if line else None

    def invoke(self, request: dict, timeout_s: float, kill_after_s: float | None = None) -> dict | None:
        """Send one invocation; SIGKILL the worker ``kill_after_s`` seconds in, when given."""
        if not self.alive():
            self.start()
        assert self.process is not None and self.process.stdin is not None
        timer = None
        if kill_after_s is not None:
            timer = threading.Timer(kill_after_s, self.kill)
            timer.start()
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
            answer = self._read_line(timeout_s)
        except (BrokenPipeError, OSError, ValueError):
            answer = None
        finally:
            if timer is not None:
                timer.cancel()
        if answer is None:
            if self.process is not None and self.process.poll() is not None and not self._killed:
                self.crashes += 1
            self.kill()  # no answer: the invocation is lost, the container with it
        return answer

    def kill(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            self._killed = True
            try:
                os.kill(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(timeout=30)
            self.kills += 1

    def pause(self, seconds: float) -> bool:
        """SIGSTOP for ``seconds`` (past its lock's TTL), then SIGCONT: a frozen container waking up.
        False when there was no process to pause."""
        process = self.process
        if process is None or process.poll() is not None:
            return False
        os.kill(process.pid, signal.SIGSTOP)
        self.pauses += 1
        time.sleep(seconds)
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
        return True

    def close(self) -> None:
        if self.alive():
            assert self.process is not None
            if self.process.stdin:
                self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None
