"""Worker benchmark: records produced to the local Kafka (librdkafka's mock cluster), consumed and
stored by the worker, against the same records fed straight to the ingest service in the same
run.

Phases, each on the same emptied tables:
- ``direct``: the records as Kafka delivered them (read back from the topic first), handed to
  the ingest service in writes of ``--batch-records``, as the worker's writer hands them;
- ``worker``: the worker (role ingest, in this process, a new consumer group each run) from its
  start until every partition's records are durable: Kafka consumption, the ledger and the
  offsets are what it adds (target: at least 0.85x of ``direct``);
- ``load_data``: LOAD DATA LOCAL INFILE of the same rows (reported: the physical floor).
They run ``--repeat`` times, alternating; the fastest of each counts (the machine may be shared).
Then, in a process of its own, ``consolidator worker --role ingest`` drains a backlog of
``--backlog`` records while its resident memory is sampled (target: under ``--rss-bound-mb``),
and a worker (role all) publishes events of groups that go quiet: each within debounce + one
tick + 1 s of its produce. Prints a table, then one JSON line.
Not part of the test suite: `make bench-worker`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

from bench_ingest import (
    BENCH_CREATOR,
    T0,
    load_data_store,
    make_records,
    reset,
    row_of,
    run_load_data,
)
from confluent_kafka import Consumer, Producer, TopicPartition

from consolidator.rules.events import KafkaRecord
from consolidator.services.ingest import build_ingest_service
from consolidator.settings import WorkerIngestSettings, load_settings
from consolidator.store.databases import drop_owned_database
from consolidator.store.mysql import ConnectionParams, MySQLStore
from consolidator.worker.runtime import build_worker

PARTITIONS = 4  # the mock cluster's topics
# the mock cluster keeps about 5 MB of a partition (some 45,000 of these records) and drops the
# oldest beyond it: a backlog is spread over topics so that every record stays
BACKLOG_RECORDS_PER_TOPIC = 100_000
CLI = [sys.executable, "-c", "from consolidator.cli import app; app(prog_name='consolidator')"]


class LocalKafka:
    def __init__(self) -> None:
        self._owner = Producer({"test.mock.num.brokers": 1, "log_level": 2})
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in self._owner.list_topics(timeout=10).brokers.values())

    def produce(self, topic: str, values: list[tuple[int, bytes, bytes]]) -> None:
        """(partition, key, value) each; every one acknowledged or the run stops."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20, "batch.num.messages": 10_000,
                             "queue.buffering.max.messages": 1_000_000, "log_level": 2})
        failed = []
        for index, (partition, key, value) in enumerate(values):
            while True:
                try:
                    producer.produce(topic, value=value, key=key, partition=partition,
                                     on_delivery=lambda e, _m: e and failed.append(e))
                    break
                except BufferError:
                    producer.poll(0.1)
            if index % 10_000 == 0:
                producer.poll(0)
        if producer.flush(120) or failed:
            raise SystemExit(f"producing to the local Kafka failed: {failed[:3]}")

    def read_back(self, topic: str) -> list[KafkaRecord]:
        """Every record of ``topic`` as the worker receives it (positions, timestamps)."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": uuid.uuid4().hex, "log_level": 2,
                             "enable.auto.commit": False})
        records: list[KafkaRecord] = []
        try:
            for partition in range(PARTITIONS):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                consumer.assign([TopicPartition(topic, partition, low)])
                got = 0
                while got < high - low:
                    for m in consumer.consume(min(10_000, high - low - got), timeout=10):
                        if m.error() is None:
                            records.append(KafkaRecord(m.topic(), m.partition(), m.offset(), m.timestamp()[1],
                                                       m.key(), m.value()))
                            got += 1
        finally:
            consumer.close()
        return records

    def kept(self, topics: list[str]) -> int:
        """How many records ``topics`` hold now (the mock cluster drops a partition's oldest
        records beyond its size)."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "kept", "log_level": 2})
        try:
            return sum(high - low for topic in topics for p in range(PARTITIONS)
                       for low, high in [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)])
        finally:
            consumer.close()

    def ends(self, topic: str) -> dict[tuple[str, int], int]:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "ends", "log_level": 2})
        try:
            return {(topic, p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    for p in range(PARTITIONS)}
        finally:
            consumer.close()


def produced(records: list[KafkaRecord]) -> list[tuple[int, bytes, bytes]]:
    return [(r.partition % PARTITIONS, r.key, r.value) for r in records]


def worker_env(args, kafka: LocalKafka, topic: str, tmp: str, **extra: str) -> dict[str, str]:
    return {"CONSOLIDATOR_DATABASE_URL": args.database_url, "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{tmp}/dead.jsonl",
            "CONSOLIDATOR_KAFKA_BOOTSTRAP": kafka.bootstrap, "CONSOLIDATOR_SOURCE_TOPICS": topic,
            "CONSOLIDATOR_KAFKA_GROUP_ID": f"bench-{uuid.uuid4().hex[:8]}", "CONSOLIDATOR_KAFKA_GROUP_PROTOCOL": "consumer",
            "CONSOLIDATOR_WORKER_BATCH_RECORDS": str(args.batch_records), **extra}


def run_direct(args, records: list[KafkaRecord], env: dict) -> float:
    service = build_ingest_service(load_settings(WorkerIngestSettings, environ=env))
    chunks = [records[i:i + args.batch_records] for i in range(0, len(records), args.batch_records)]
    started = time.perf_counter()
    for chunk in chunks:
        if service.ingest(chunk).failed:
            raise SystemExit("ingest reported failures during the benchmark")
    seconds = time.perf_counter() - started
    service.store.close()
    return seconds


def run_worker(args, kafka: LocalKafka, topic: str, env: dict) -> float:
    """From the worker's start until every partition is durable to its end."""
    ends = {p: end for p, end in kafka.ends(topic).items() if end}
    worker = build_worker(load_settings(WorkerIngestSettings, environ=env), "ingest")
    started = time.perf_counter()
    done = threading.Event()
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    while not done.is_set():
        positions = worker.poll.ledger.positions()
        if all(positions.get(p) == end for p, end in ends.items()):
            done.set()
        elif time.perf_counter() - started > 600:
            raise SystemExit("the worker did not finish within 600 s")
        else:
            time.sleep(0.01)
    seconds = time.perf_counter() - started
    worker.request_stop("benchmark phase done")
    thread.join(60)
    return seconds


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def start_worker(env: dict, tmp: str, *args: str) -> subprocess.Popen:
    """``consolidator worker`` as a process; its log lines go to a file in ``tmp``."""
    with open(Path(tmp) / "worker.log", "w") as log:
        return subprocess.Popen([*CLI, "worker", *args], env=env, stdout=log, stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen, tmp: str, why: str | None = None) -> None:
    """Stop a worker process (SIGTERM, then wait); with ``why``, stop the run naming it and the
    end of the worker's log."""
    process.terminate()
    process.wait(timeout=60)
    if why is not None:
        raise SystemExit(f"{why}: {(Path(tmp) / 'worker.log').read_text()[-2000:]}")


def run_backlog(args, kafka: LocalKafka, store: MySQLStore, tmp: str) -> dict:
    """A worker process drains ``--backlog`` records; its peak resident memory, sampled."""
    records = make_records(args.backlog, args.groups, seed=13)
    run = uuid.uuid4().hex[:6]
    topics = [f"backlog-{run}-{i}" for i in range(-(-len(records) // BACKLOG_RECORDS_PER_TOPIC))]
    ends = {}
    for i, topic in enumerate(topics):
        kafka.produce(topic, produced(records[i * BACKLOG_RECORDS_PER_TOPIC:(i + 1) * BACKLOG_RECORDS_PER_TOPIC]))
        ends |= {p: end for p, end in kafka.ends(topic).items() if end}
    if kafka.kept(topics) != len(records):
        raise SystemExit(f"the local Kafka kept {kafka.kept(topics)} of the backlog's {len(records)} records")
    reset(store)
    env = {**os.environ, **worker_env(args, kafka, ",".join(topics), tmp)}
    started = time.perf_counter()
    process = start_worker(env, tmp, "--role", "ingest")
    peak = 0.0
    while True:
        peak = max(peak, rss_mb(process.pid))
        marks = {(m.topic, m.partition): m.high_water for m in store.partition_offsets()}
        if all(marks.get(p, -1) == end - 1 for p, end in ends.items()):
            break
        if process.poll() is not None or time.perf_counter() - started > 1800:
            stop(process, tmp, "the backlog worker stopped or took too long")
        time.sleep(0.2)
    seconds = time.perf_counter() - started
    stop(process, tmp)
    return {"backlog_records": args.backlog, "backlog_seconds": round(seconds, 2),
            "backlog_records_per_s": round(args.backlog / seconds), "rss_peak_mb": round(peak, 1)}


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            return answer.status == 200
    except OSError:  # refused, or 503 (urllib's HTTPError is an OSError)
        return False


def run_latency(args, kafka: LocalKafka, store: MySQLStore, tmp: str) -> dict:
    """Events of new groups that go quiet at once: each must be published within debounce + one
    tick + 1 s of its produce (the producer's timestamp)."""
    topic = f"latency-{uuid.uuid4().hex[:6]}"
    sink = Path(tmp) / "latency-batches.jsonl"
    reset(store)  # nothing pending but these events
    kafka.produce(topic, [(0, b"warm-up", b"{}")])  # the topic exists before the worker subscribes
    debounce, tick = args.debounce_seconds, args.tick_seconds
    env = {**os.environ, **worker_env(args, kafka, topic, tmp, CONSOLIDATOR_SINK_URL=f"file://{sink}",
                                      CONSOLIDATOR_REDIS_URL=args.redis_url,
                                      CONSOLIDATOR_LOCK_KEY=f"bench-worker:{uuid.uuid4().hex}",
                                      CONSOLIDATOR_DEBOUNCE_SECONDS=str(debounce),
                                      CONSOLIDATOR_HARD_WINDOW_SECONDS=str(max(60.0, debounce)),
                                      CONSOLIDATOR_TICK_INTERVAL_SECONDS=str(tick))}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env["CONSOLIDATOR_WORKER_HTTP_PORT"] = str(port)
    process = start_worker(env, tmp)
    latencies = []
    ready_by = time.monotonic() + 60
    while not ready(port):  # started, assigned, the database reachable
        if time.monotonic() > ready_by or process.poll() is not None:
            stop(process, tmp, "the latency worker did not get ready")
        time.sleep(0.1)
    published = ""  # the sink file read so far
    for n in range(args.latency_events):
        group = f"quiet-{n}"
        sent_ms = int(time.time() * 1000)
        value = json.dumps({"location_id": group, "order_id": "O1", "items": [{"sku": "S", "quantity": 1}]})
        kafka.produce(topic, [(n % PARTITIONS, group.encode(), value.encode())])
        deadline = time.monotonic() + debounce + tick + 30
        while f'"{group}"' not in published:
            if time.monotonic() > deadline or process.poll() is not None:
                stop(process, tmp, f"group {group} was not published")
            time.sleep(0.02)
            if sink.exists():
                with sink.open() as handle:
                    handle.seek(len(published))
                    published += handle.read()
        latencies.append((time.time() * 1000 - sent_ms) / 1000)
    stop(process, tmp)
    bound = debounce + tick + 1
    return {"latency_events": len(latencies), "latency_max_s": round(max(latencies), 3),
            "latency_median_s": round(sorted(latencies)[len(latencies) // 2], 3), "latency_bound_s": bound,
            "latency_within_bound": max(latencies) <= bound}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--batch-records", type=int, default=5_000, help="records per write (WORKER_BATCH_RECORDS)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each phase, alternating; the fastest counts")
    parser.add_argument("--backlog", type=int, default=1_000_000, help="records of the memory phase")
    parser.add_argument("--rss-bound-mb", type=float, default=300.0)
    parser.add_argument("--latency-events", type=int, default=5)
    parser.add_argument("--debounce-seconds", type=float, default=2.0)
    parser.add_argument("--tick-seconds", type=float, default=1.0)
    parser.add_argument("--database-url", default=os.environ.get(
        "BENCH_DATABASE_URL", "mysql://root:@127.0.0.1:3306/consolidator_bench_worker"))
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--save", type=Path, help="also write the JSON line to this file")
    args = parser.parse_args()

    params = ConnectionParams.from_url(args.database_url)
    store = load_data_store(params)
    kafka = LocalKafka()
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    started = time.perf_counter()
    kafka.produce(topic, produced(make_records(args.records, args.groups)))
    print(f"produced {args.records} records in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    records = kafka.read_back(topic)
    records.sort(key=lambda r: (r.offset, r.partition))  # interleaved, as a consumer fetches them
    rows = [row_of(r, T0) for r in records]
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        phases = [("direct", lambda: run_direct(args, records, worker_env(args, kafka, topic, tmp))),
                  ("worker", lambda: run_worker(args, kafka, topic, worker_env(args, kafka, topic, tmp))),
                  ("load_data", lambda: run_load_data(store, rows, tmp))] * args.repeat
        for name, run in phases:
            reset(store)
            seconds = run()
            rate = len(records) / seconds
            print(f"{name:>9}: {len(records):>8} records in {seconds:7.2f} s = {rate:>9.0f} records/s",
                  file=sys.stderr)
            results[name] = max(results.get(name, 0.0), rate)
        backlog = run_backlog(args, kafka, store, tmp)
        print(f"  backlog: {backlog}", file=sys.stderr)
        latency = run_latency(args, kafka, store, tmp)
        print(f"  latency: {latency}", file=sys.stderr)
    store.close()
    drop_owned_database(params, BENCH_CREATOR)
    figures = {
        "records": len(records), "groups": args.groups, "batch_records": args.batch_records, "repeat": args.repeat,
        "partitions": PARTITIONS,
        "worker_records_per_s": round(results["worker"]),
        "direct_records_per_s": round(results["direct"]),
        "load_data_records_per_s": round(results["load_data"]),
        "ratio_vs_direct": round(results["worker"] / results["direct"], 3),
        "ratio_vs_load_data": round(results["worker"] / results["load_data"], 3),
        **backlog, "rss_bound_mb": args.rss_bound_mb, "rss_within_bound": backlog["rss_peak_mb"] <= args.rss_bound_mb,
        **latency,
        "load_average": [round(x, 2) for x in os.getloadavg()],  # at the end: a shared machine shows here
        "targets": {"ratio_vs_direct": 0.85, "rss_peak_mb": f"<= {args.rss_bound_mb:g}",
                    "latency_max_s": "<= debounce + tick + 1"},
    }
    print(json.dumps(figures))
    if args.save:
        args.save.write_text(json.dumps(figures) + "\n")


if __name__ == "__main__":
    main()
