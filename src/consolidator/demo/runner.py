"""The local end-to-end demo: mock Kafka -> real ingest handler -> MySQL -> real flush handler
-> Kafka output topic -> read back -> invariant check.

Pieces:
- librdkafka's mock cluster (in-process, real Kafka protocol on localhost);
- a producer thread writing the synthetic topic in bursts;
- an event-source emulator (like Lambda's MSK event source mapping): a real consumer, batches
  of records turned into MSK events, the real ``functions/ingest/handler.py`` called with a
  local Lambda context, ``batchItemFailures`` honoured by re-reading each failed partition
  from its lowest failed offset; some batches are delivered twice (Lambda is at least once);
  the dead-letter destination is down at the start, so a poison record fails once and is
  re-read;
- a scheduler thread invoking the real ``functions/flush/handler.py`` back to back with
  scaled-down windows;
- a consumer reading the output topic back, and :func:`consolidator.demo.check.check`.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import consolidator
from consolidator.demo.check import CheckResult, OutBatch, Produced, check
from consolidator.demo.synthetic import Message, bursts
from consolidator.errors import ConsolidatorError
from consolidator.events import KafkaRecord
from consolidator.lambda_context import LocalLambdaContext
from consolidator.msk import event_from_records
from consolidator.store.mysql import ConnectionParams, MySQLStore, recreate_database

INPUT_TOPIC = "orders"
OUTPUT_TOPIC = "consolidated-batches"
DEMO_DATABASE = "consolidator_demo"
_quiet = logging.getLogger("consolidator.demo.kafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


class DemoError(ConsolidatorError):
    """The demo could not run (missing checkout, services down, timeout)."""


@dataclass
class DemoConfig:
    warehouses: int = 20
    orders: int = 3000
    poison: int = 5
    seed: int = 7
    bursts: int = 8
    burst_gap_s: tuple[float, float] = (0.3, 2.5)  # pause between bursts (some longer than debounce)
    database_url: str | None = None  # server to use (its database part is ignored)
    database_name: str = DEMO_DATABASE  # dropped and recreated on every run
    redis_url: str = "redis://127.0.0.1:6379/0"
    debounce_s: float = 2.0
    hard_window_s: float = 6.0
    max_batch_size: int = 100
    tick_interval_s: float = 1.0
    flush_invocation_s: float = 5.0  # one scheduled flush invocation's timeout
    esm_batch_size: int = 300
    esm_batch_window_s: float = 0.25
    redeliver_every: int = 7  # every Nth ingest invocation is delivered twice
    dead_letter_outage: bool = True
    timeout_s: float = 150.0
    repo_root: Path | None = None
    verbose: bool = False


@dataclass
class DemoResult:
    check: CheckResult
    summary: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.check.passed


def repo_root(config: DemoConfig) -> Path:
    root = config.repo_root or Path(consolidator.__file__).resolve().parents[2]
    if not (root / "functions" / "ingest" / "handler.py").is_file():
        raise DemoError(
            f"the demo runs the real handlers from the repository checkout, but {root / 'functions'} "
            "is not there; run it from a clone installed with `pip install -e .`"
        )
    return root


def load_handler(path: Path, name: str):
    """Import a Lambda handler module by file path (``functions/`` is not a package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise DemoError(f"cannot load handler {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def demo_database_url(config: DemoConfig) -> str:
    base = config.database_url or os.environ.get("CONSOLIDATOR_DATABASE_URL") or "mysql://root@127.0.0.1:3306/"
    parts = urlsplit(base)
    return parts._replace(path="/" + config.database_name).geturl()


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the handlers, restore the previous values afterwards."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def check_redis(url: str) -> None:
    """Fail fast: without Redis every flush tick would be skipped and the demo would time out."""
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
    except (redis.exceptions.RedisError, OSError) as exc:
        raise DemoError(f"Redis is not reachable at {url} ({exc}); start it or pass --redis-url") from None


# -- Kafka ------------------------------------------------------------------------------------


class MockKafka:
    """librdkafka's mock cluster; alive as long as this object's producer is."""

    def __init__(self, brokers: int = 3) -> None:
        from confluent_kafka import Producer

        self._owner = Producer({"test.mock.num.brokers": brokers, "logger": _quiet})
        metadata = self._owner.list_topics(timeout=10)
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in sorted(metadata.brokers.values(), key=lambda b: b.id))

    def partitions(self, topic: str) -> list[int]:
        metadata = self._owner.list_topics(topic, timeout=10)
        return sorted(metadata.topics[topic].partitions)


class SyntheticProducer(threading.Thread):
    """Produces the bursts with pauses; records where every message landed."""

    def __init__(self, bootstrap: str, plan: list[list[Message]], gaps: list[float]) -> None:
        super().__init__(name="demo-producer", daemon=True)
        from confluent_kafka import Producer

        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                   "linger.ms": 5, "logger": _quiet})
        self.plan, self.gaps = plan, gaps
        self.produced: list[Produced] = []
        self.sent = 0
        self.error: str | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            for index, burst in enumerate(self.plan):
                for message in burst:
                    self._produce(message)
                    self._producer.poll(0)
                if self._producer.flush(30) != 0:
                    raise DemoError("the synthetic producer could not deliver a burst")
                if index < len(self.gaps):
                    time.sleep(self.gaps[index])
        except Exception as exc:  # noqa: BLE001 - re-raised by the main thread as DemoError
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.done.set()

    def close(self) -> None:
        self._producer.flush(10)
        del self._producer  # destroyed before the mock cluster goes away

    def _produce(self, message: Message) -> None:
        timestamp_ms = int(time.time() * 1000)  # CreateTime: the event time latency is measured from

        def delivered(err, msg) -> None:
            if err is not None:
                self.error = f"delivery failed: {err}"
                return
            self.produced.append(Produced((msg.topic(), msg.partition(), msg.offset()), timestamp_ms,
                                          message.group_key, message.item_id, message.poison))

        while True:
            try:
                self._producer.produce(INPUT_TOPIC, key=message.key, value=message.value, timestamp=timestamp_ms,
                                       on_delivery=delivered)
                break
            except BufferError:
                self._producer.poll(0.1)
        self.sent += 1


class EventSourceEmulator:
    """A small stand-in for Lambda's MSK event source mapping (see the module docstring)."""

    def __init__(self, bootstrap: str, partitions: list[int], handler, config: DemoConfig) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self._tp = TopicPartition
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": "consolidator-demo-esm", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "logger": _quiet,
        })
        self.partitions = partitions
        self.next_offset = dict.fromkeys(partitions, 0)
        self._consumer.assign([TopicPartition(INPUT_TOPIC, p, 0) for p in partitions])
        self.handler = handler
        self.config = config
        self.invocations = 0
        self.redeliveries = 0
        self.failed_items = 0
        self.rereads = 0
        self.records_delivered = 0

    def caught_up(self) -> bool:
        for p in self.partitions:
            _low, high = self._consumer.get_watermark_offsets(self._tp(INPUT_TOPIC, p), timeout=5, cached=False)
            if self.next_offset[p] < high:
                return False
        return True

    def poll_batch(self) -> list[KafkaRecord]:
        records: list[KafkaRecord] = []
        deadline = time.monotonic() + self.config.esm_batch_window_s
        while len(records) < self.config.esm_batch_size:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            message = self._consumer.poll(min(left, 0.1))
            if message is None:
                continue
            if message.error():
                raise DemoError(f"input consumer failed: {message.error()}")
            if message.offset() < self.next_offset[message.partition()]:
                continue  # already delivered and committed
            records.append(KafkaRecord(
                message.topic(), message.partition(), message.offset(), message.timestamp()[1], message.key(),
                message.value(), tuple((k, v or b"") for k, v in message.headers() or ()),
            ))
        return records

    def step(self, on_failure=None) -> int:
        """One poll + invocation. Returns the number of records delivered."""
        records = self.poll_batch()
        if not records:
            return 0
        event = event_from_records(records, "arn:aws:kafka:local:000000000000:cluster/consolidator-demo/0")
        self.invocations += 1
        response = self.handler(event, LocalLambdaContext(function_name="consolidator-ingest"))
        if self.config.redeliver_every and self.invocations % self.config.redeliver_every == 0:
            self.redeliveries += 1  # at-least-once: the same batch again must change nothing
            self.handler(event, LocalLambdaContext(function_name="consolidator-ingest"))
        failures = response.get("batchItemFailures", [])
        lowest: dict[int, int] = {}
        for failure in failures:
            ident = failure["itemIdentifier"]
            partition = int(ident["partition"].rsplit("-", 1)[1])
            lowest[partition] = min(int(ident["offset"]), lowest.get(partition, int(ident["offset"])))
        for record in records:
            if record.partition not in lowest:
                self.next_offset[record.partition] = max(self.next_offset[record.partition], record.offset + 1)
        if lowest:
            self.failed_items += len(failures)
            self.rereads += len(lowest)
            for partition, offset in lowest.items():
                self.next_offset[partition] = offset
            # Re-read every failed partition from its lowest failed offset (like the ESM does).
            self._consumer.assign([self._tp(INPUT_TOPIC, p, self.next_offset[p]) for p in self.partitions])
            if on_failure:
                on_failure()
        delivered = sum(1 for r in records if r.partition not in lowest or r.offset < lowest[r.partition])
        self.records_delivered += delivered
        return delivered

    def close(self) -> None:
        self._consumer.close()


class FlushScheduler(threading.Thread):
    """Invokes the real flush handler back to back, like a schedule firing once per timeout."""

    def __init__(self, handler, invocation_s: float) -> None:
        super().__init__(name="demo-flush", daemon=True)
        self.handler, self.invocation_s = handler, invocation_s
        self.stop = threading.Event()
        self.totals = {"invocations": 0, "ticks": 0, "published": 0, "dead": 0, "publish_failures": 0, "skipped": 0}
        self.error: str | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                result = self.handler({}, LocalLambdaContext("consolidator-flush", round(self.invocation_s * 1000)))
                self.totals["invocations"] += 1
                for key in ("ticks", "published", "dead", "publish_failures", "skipped"):
                    self.totals[key] += int(result.get(key, 0))
        except Exception as exc:  # noqa: BLE001 - re-raised by the main thread as DemoError
            self.error = f"{type(exc).__name__}: {exc}"


def read_output(bootstrap: str, topic: str = OUTPUT_TOPIC, idle_s: float = 2.0) -> list[OutBatch]:
    """Every message of the output topic, from the beginning, as :class:`OutBatch`."""
    import json

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "consolidator-demo-reader",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "logger": _quiet})
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions) if topic in metadata.topics else []
        high = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)[1]
                for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        out: list[OutBatch] = []
        position = dict.fromkeys(partitions, 0)
        last = time.monotonic()
        while any(position[p] < high[p] for p in partitions) and time.monotonic() - last < idle_s:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                raise DemoError(f"output consumer failed: {message.error()}")
            last = time.monotonic()
            position[message.partition()] = message.offset() + 1
            body = json.loads(message.value())
            header = dict(message.headers() or ()).get("batch_id", b"").decode()
            if header != body.get("batch_id"):
                raise DemoError(f"batch_id header {header!r} differs from the body's {body.get('batch_id')!r}")
            out.append(OutBatch(body, message.timestamp()[1]))
        return out
    finally:
        consumer.close()


# -- the run ----------------------------------------------------------------------------------


def run_demo(config: DemoConfig | None = None, console: Console | None = None) -> DemoResult:
    config = config or DemoConfig()
    console = console or Console()
    started = time.monotonic()
    root = repo_root(config)
    database_url = demo_database_url(config)
    workdir = Path(tempfile.mkdtemp(prefix="consolidator-demo-"))
    dead_letter_dir = workdir / "dead-letter"
    dead_letter_path = dead_letter_dir / "dead-letter.jsonl"
    if config.dead_letter_outage:
        dead_letter_dir.write_text("outage: a file where the dead-letter directory should be\n")

    console.print(f"[bold]Consolidator demo[/]: {config.orders} orders, {config.warehouses} warehouses, "
                  f"{config.poison} poison messages, {config.bursts} bursts")
    check_redis(config.redis_url)
    recreate_database(ConnectionParams.from_url(database_url))
    monitor = MySQLStore.from_url(database_url)
    monitor.migrate(int(time.time() * 1000))
    kafka = MockKafka()
    console.print(f"mock Kafka at {kafka.bootstrap}; database {config.database_name}; work files in {workdir}")

    env = {
        "CONSOLIDATOR_DATABASE_URL": database_url,
        "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{dead_letter_path}",
        "CONSOLIDATOR_SINK_URL": f"kafka://{kafka.bootstrap}/{OUTPUT_TOPIC}",
        "CONSOLIDATOR_REDIS_URL": config.redis_url,
        "CONSOLIDATOR_DEBOUNCE_SECONDS": str(config.debounce_s),
        "CONSOLIDATOR_HARD_WINDOW_SECONDS": str(config.hard_window_s),
        "CONSOLIDATOR_MAX_BATCH_SIZE": str(config.max_batch_size),
        "CONSOLIDATOR_TICK_INTERVAL_SECONDS": str(config.tick_interval_s),
        "CONSOLIDATOR_LOCK_TTL_SECONDS": str(config.flush_invocation_s),
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "WARNING" if config.verbose else "CRITICAL",
    }
    plan = bursts(config.warehouses, config.orders, config.poison, config.bursts, config.seed)
    import random

    rng = random.Random(config.seed + 1)
    gaps = [rng.uniform(*config.burst_gap_s) for _ in range(config.bursts - 1)]
    total = sum(len(b) for b in plan)

    with environment(env):
        ingest = load_handler(root / "functions/ingest/handler.py", f"demo_ingest_handler_{id(config)}")
        flush = load_handler(root / "functions/flush/handler.py", f"demo_flush_handler_{id(config)}")
        producer = SyntheticProducer(kafka.bootstrap, plan, gaps)
        producer.start()
        producer_started = time.monotonic()
        while not producer.produced and not producer.done.is_set():
            time.sleep(0.05)
        emulator = EventSourceEmulator(kafka.bootstrap, kafka.partitions(INPUT_TOPIC), ingest.handler, config)
        scheduler = FlushScheduler(flush.handler, config.flush_invocation_s)
        scheduler.start()

        def repair_dead_letter() -> None:
            if dead_letter_dir.is_file():
                dead_letter_dir.unlink()
                dead_letter_dir.mkdir()

        try:
            with Progress(TextColumn("{task.description:<24}"), BarColumn(bar_width=16), MofNCompleteColumn(),
                          TextColumn("{task.fields[note]}"), TimeElapsedColumn(), console=console,
                          transient=False) as progress:
                t_produce = progress.add_task("produced to 'orders'", total=total, note="")
                t_ingest = progress.add_task("ingest handler", total=total, note="")
                t_flush = progress.add_task("flush handler (rows)", total=None, note="")
                deadline = started + config.timeout_s
                while True:
                    if time.monotonic() > deadline:
                        raise DemoError(f"the demo did not finish within {config.timeout_s:.0f}s")
                    for thread in (producer, scheduler):
                        if thread.error:
                            raise DemoError(f"{thread.name}: {thread.error}")
                    emulator.step(on_failure=repair_dead_letter)
                    rows = monitor.row_counts()
                    unsent = rows.get("PENDING", 0) + rows.get("CLAIMED", 0)
                    stored = sum(rows.values())
                    progress.update(t_produce, completed=producer.sent)
                    progress.update(t_ingest, completed=emulator.records_delivered,
                                    note=f"{emulator.invocations} calls")
                    progress.update(t_flush, total=stored or None, completed=rows.get("SENT", 0) + rows.get("DEAD", 0),
                                    note=f"{scheduler.totals['published']} batches")
                    if producer.done.is_set() and unsent == 0 and emulator.caught_up():
                        break
        finally:
            scheduler.stop.set()
            scheduler.join(timeout=config.flush_invocation_s + 30)
            emulator.close()
        if scheduler.error:
            raise DemoError(f"{scheduler.name}: {scheduler.error}")
        with contextlib.suppress(ConsolidatorError):
            flush.service().sink.close()
        flush.service.cache_clear()  # Kafka clients go before the mock cluster does
        ingest.service.cache_clear()
        producer.close()
        finished_ingest = time.monotonic()
        batches = read_output(kafka.bootstrap)
        dead_letter = _read_jsonl(dead_letter_path)
        batch_counts = monitor.batch_counts()
        monitor.close()
        del ingest, flush
        gc.collect()

    # T with one tick of grace: the claim at a tick is followed by the publish and its ack.
    latency_bound_s = config.hard_window_s + 2 * config.tick_interval_s
    result = check(producer.produced, batches, dead_letter, latency_bound_s=latency_bound_s)
    summary = dict(result.stats)
    sent_batches = batch_counts.get("SENT", 0)
    if sent_batches != summary["batches_out"]:
        result.problems.append(f"the buffer marked {sent_batches} batches SENT, {summary['batches_out']} were read back")
    summary |= {
        "passed": result.passed,
        "problems": result.problems,
        "ingest_invocations": emulator.invocations,
        "redelivered_invocations": emulator.redeliveries,
        "batch_item_failures": emulator.failed_items,
        "partition_rereads": emulator.rereads,
        "flush_invocations": scheduler.totals["invocations"],
        "flush_ticks": scheduler.totals["ticks"],
        "elapsed_s": round(time.monotonic() - started, 1),
        "pipeline_s": round(finished_ingest - producer_started, 1),
        "latency_bound_s": latency_bound_s,
        "policy": {"debounce_s": config.debounce_s, "hard_window_s": config.hard_window_s,
                   "max_batch_size": config.max_batch_size, "tick_interval_s": config.tick_interval_s},
        "workdir": str(workdir),
    }
    print_summary(console, summary)
    if result.passed and not config.verbose:
        shutil.rmtree(workdir, ignore_errors=True)
        summary["workdir"] = None
    del kafka
    return DemoResult(result, summary)


def _read_jsonl(path: Path) -> list[dict]:
    from consolidator import jsonlines

    return jsonlines.read(path)


def print_summary(console: Console, s: dict) -> None:
    table = Table(title="before -> after", show_header=True)
    table.add_column("")
    table.add_column("value", justify="right")
    rows = [
        ("messages in ('orders')", s["messages_in"]),
        ("  valid events", s["valid_events"]),
        ("  distinct orders", s["distinct_items"]),
        ("  poison messages", s["poison_messages"]),
        ("batches out ('consolidated-batches')", s["batches_out"]),
        ("  deliveries (dupes are at-least-once)", s["batch_deliveries"]),
        ("compaction (valid events per batch)", f"{s['compaction_ratio']}x"),
        ("batch size min / median / max", f"{s['batch_size_min']} / {s['batch_size_median']} / {s['batch_size_max']}"),
        ("flush reasons", ", ".join(f"{k} {v}" for k, v in sorted(s["flush_reasons"].items(), key=str))),
        ("latency/event p50 / p95 / max",
         f"{s['latency_s_p50']}s / {s['latency_s_p95']}s / {s['latency_s_max']}s"),
        ("T: first ingest to output, max / bound",
         f"{s['first_ingest_to_output_s_max']}s / {s['latency_bound_s']}s"),
        ("dead-lettered (poison + dead batches)", s["dead_lettered"]),
        ("ingest calls (of them delivered twice)", f"{s['ingest_invocations']} ({s['redelivered_invocations']})"),
        ("batchItemFailures -> partition re-reads", f"{s['batch_item_failures']} -> {s['partition_rereads']}"),
        ("flush invocations / ticks", f"{s['flush_invocations']} / {s['flush_ticks']}"),
        ("elapsed", f"{s['elapsed_s']}s"),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    console.print(table)
    policy = s["policy"]
    console.print(f"policy (scaled down): debounce {policy['debounce_s']}s, hard window {policy['hard_window_s']}s, "
                  f"max batch {policy['max_batch_size']}, tick {policy['tick_interval_s']}s")
    if s["passed"]:
        console.print("[bold green]invariant check passed[/]: every valid event is in exactly one batch id "
                      "(or coalesced into a newer one that is), every poison message is in the dead letter, "
                      f"no event under two batch ids, every batch out within {s['latency_bound_s']}s of its "
                      "first ingest")
    else:
        console.print("[bold red]invariant check FAILED[/]")
        for problem in s["problems"]:
            console.print(f"  - {problem}", highlight=False, markup=False)
        if s.get("workdir"):
            console.print(f"work files kept in {s['workdir']}")
