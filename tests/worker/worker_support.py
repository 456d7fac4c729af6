"""The worker's test parts (imported as ``worker_support``): librdkafka's mock cluster, a TCP
proxy in front of the shared MariaDB that a test can make refuse or black-hole connections, and
the worker run in-process or as a process. The fixtures are in conftest.py."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support import order_value, sql

import consolidator.settings as settings_models
from consolidator.cli.worker import (
    MODELS,  # the settings model of each role, as the command loads it
)
from consolidator.settings import load_settings
from consolidator.store.mysql import MySQLStore
from consolidator.worker.runtime import Worker, build_worker

CLI = [sys.executable, "-c", "from consolidator.cli import app; app(prog_name='consolidator')"]


def wait_for(predicate: Callable[[], object], timeout_s: float, what: str) -> object:
    """``predicate()``'s first truthy value, polled every 50 ms; fails the test at the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


class MockKafka:
    """A one-broker mock cluster living as long as this object (topics: 4 partitions)."""

    def __init__(self) -> None:
        self._owner = Producer({"test.mock.num.brokers": 1, "log_level": 2})
        brokers = self._owner.list_topics(timeout=10).brokers.values()
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers)
        self.producer = Producer({"bootstrap.servers": self.bootstrap, "log_level": 2, "linger.ms": 5})

    def produce(self, topic: str, first: int, count: int, *, partition: int | None = None,
                values: Callable[[int], bytes] | None = None) -> None:
        """Orders ``first`` .. ``first + count - 1`` (order id ``O<n>``, one row each, groups by
        ``n % 5``; ``values(n)`` instead where it is not None), keyed by their group; all
        acknowledged or the test fails."""
        errors = []
        for n in range(first, first + count):
            value = values(n) if values else None  # None: the order
            if value is None:
                value = order_value(location=f"WH-{n % 5}", order=f"O{n}")
            kwargs = {} if partition is None else {"partition": partition}
            self.producer.produce(topic, key=f"WH-{n % 5}".encode(), value=value,
                                  on_delivery=lambda e, _m: e and errors.append(e), **kwargs)
            if n % 1000 == 999:
                self.producer.poll(0)
        assert self.producer.flush(30) == 0 and not errors, errors

    def high_watermarks(self, topic: str) -> dict[int, int]:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "watermarks", "log_level": 2})
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        finally:
            consumer.close()

    def committed(self, group: str, topic: str) -> dict[int, int]:
        """The group's committed offsets of ``topic`` (partitions with none left out)."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "log_level": 2})
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            found = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
            return {tp.partition: tp.offset for tp in found if tp.offset >= 0}
        finally:
            consumer.close()


class TcpProxy:
    """127.0.0.1:<port> forwarding to a server, switchable: ``forward``, ``refuse`` (connections
    are closed at once, open ones dropped: the database is down) or ``blackhole`` (connections are
    accepted, nothing is forwarded either way: the database hangs)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.mode = "forward"
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def connections(self) -> int:
        """Connections open through the proxy now."""
        with self._lock:
            return len(self._open) // 2

    def set(self, mode: str) -> None:
        self.mode = mode
        if mode == "refuse":
            with self._lock:
                for s in self._open:
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                    s.close()
                self._open.clear()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.set("refuse")

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.mode == "refuse":
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, destination: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                while self.mode == "blackhole":
                    time.sleep(0.05)
                if self.mode == "refuse":
                    break
                destination.sendall(data)
        except OSError:
            pass
        finally:
            # shut down before closing: the other direction's thread may be blocked in recv on
            # one of these sockets, and close alone neither wakes it nor sends the FIN, which
            # would leave the server a connection (and its transaction's locks) forever
            for s in (source, destination):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


@contextlib.contextmanager
def running(env: dict, role: str = "all", build: Callable[[object], Worker] | None = None) -> Iterator[Worker]:
    """A worker of ``env`` running in this process (its ``run`` on a thread); stopped on exit."""
    settings = load_settings(getattr(settings_models, MODELS[role]), environ=env)
    worker = build(settings) if build else build_worker(settings, role)
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(worker.run()), daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.request_stop("test")
        thread.join(60)
        assert not thread.is_alive(), "the worker did not stop within 60 s"
        assert codes == [0], f"the worker exited with {codes}"


def assigned(worker: Worker, count: int) -> Callable[[], bool]:
    return lambda: len(worker.poll.ledger.assigned()) == count


def durable_positions(store: MySQLStore, dead_letter: Path) -> set[tuple[str, int, int]]:
    """Every (topic, partition, offset) stored as a buffer row or dead-lettered."""
    rows = sql(store, "SELECT src_topic, src_partition, src_offset FROM buffer_rows")
    found = {(r["src_topic"], r["src_partition"], r["src_offset"]) for r in rows}
    if dead_letter.exists():
        for line in dead_letter.read_text().splitlines():
            source = json.loads(line).get("source")
            if source:
                found.add((source["topic"], source["partition"], source["offset"]))
    return found


def assert_committed_durable(kafka: MockKafka, group: str, topic: str, store: MySQLStore,
                             dead_letter: Path) -> dict[int, int]:
    """Every record below each committed offset of the group is durable. Returns the offsets."""
    committed = kafka.committed(group, topic)
    durable = durable_positions(store, dead_letter)
    for partition, offset in committed.items():
        missing = [o for o in range(offset) if (topic, partition, o) not in durable]
        assert not missing, f"{topic}[{partition}] committed at {offset} but offsets {missing[:10]} are not durable"
    return committed


@contextlib.contextmanager
def worker_process(env: dict, *args: str) -> Iterator[subprocess.Popen]:
    """``consolidator worker`` as a process (stdout: its JSON log lines); killed if still running."""
    process = subprocess.Popen([*CLI, "worker", *args], env={**os.environ, **env}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)


def log_lines(text: str) -> list[dict]:
    """The JSON log lines of a worker's stdout (every line must be one)."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]
