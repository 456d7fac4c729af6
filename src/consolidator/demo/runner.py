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
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import consolidator
from consolidator.demo.check import OutBatch, check
from consolidator.demo.config import (
    INPUT_TOPIC,
    OUTPUT_TOPIC,
    DemoConfig,
    DemoError,
    DemoResult,
)
from consolidator.demo.logs import FunctionLogRouter, as_function
from consolidator.demo.parts import (
    EventSourceEmulator,
    FlushScheduler,
    MockKafka,
    SyntheticProducer,
    read_output,
)
from consolidator.demo.synthetic import bursts
from consolidator.rules.errors import ConsolidatorError
from consolidator.store.databases import recreate_owned_database
from consolidator.store.mysql import ConnectionParams, MySQLStore
from consolidator.support import tracing
from consolidator.support.redact import masked

DEMO_CREATOR = "consolidator demo"  # the ownership marker of the databases the demo creates
LOCAL_SERVER = "mysql://root@127.0.0.1:3306/"


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
    """The demo database on the server given by ``--database-url``, else on the local server:
    never the server of ``CONSOLIDATOR_DATABASE_URL`` (a production server, perhaps) unless the
    operator names it explicitly."""
    parts = urlsplit(config.database_url or LOCAL_SERVER)
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
        raise DemoError(f"Redis is not reachable at {masked(url)} ({exc}); start it or pass --redis-url") from None



# -- the run ----------------------------------------------------------------------------------


def run_demo(config: DemoConfig | None, console: Console) -> DemoResult:
    """Run the demo, printing on ``console`` (the CLI's: it prints every string as text,
    consolidator.cli.render)."""
    config = config or DemoConfig()
    started = time.monotonic()
    root = repo_root(config)
    database_url = demo_database_url(config)
    # first, before any output: the demo drops only a database it created itself (its marker),
    # never a system schema, an application's database or a production buffer
    recreate_owned_database(ConnectionParams.from_url(database_url), DEMO_CREATOR, int(time.time() * 1000))
    workdir = Path(tempfile.mkdtemp(prefix="consolidator-demo-"))
    dead_letter_dir = workdir / "dead-letter"
    dead_letter_path = dead_letter_dir / "dead-letter.jsonl"
    if config.dead_letter_outage:
        dead_letter_dir.write_text("outage: a file where the dead-letter directory should be\n")

    console.print("Consolidator demo", style="bold", end="")
    console.print(f": {config.orders} orders, {config.warehouses} warehouses, {config.poison} poison messages,"
                  f" {config.bursts} bursts")
    check_redis(config.redis_url)
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
    # OTEL_TRACES_EXPORTER=console (or otlp): the producer, both functions and the reader of the
    # output topic trace into one provider (service consolidator-demo), exported as the demo ends
    tracing.configure("consolidator-demo")
    plan = bursts(config.warehouses, config.orders, config.poison, config.bursts, config.seed)
    import random

    rng = random.Random(config.seed + 1)
    gaps = [rng.uniform(*config.burst_gap_s) for _ in range(config.bursts - 1)]
    total = sum(len(b) for b in plan)

    with environment(env):
        ingest = load_handler(root / "functions/ingest/handler.py", f"demo_ingest_handler_{id(config)}")
        flush = load_handler(root / "functions/flush/handler.py", f"demo_flush_handler_{id(config)}")
        FunctionLogRouter({"ingest": ingest.logger, "flush": flush.logger}).install(  # stderr, own service
            logging.WARNING if config.verbose else logging.CRITICAL)
        producer = SyntheticProducer(kafka.bootstrap, plan, gaps)
        producer.start()
        producer_started = time.monotonic()
        while not producer.produced and not producer.done.is_set():
            time.sleep(0.05)
        emulator = EventSourceEmulator(kafka.bootstrap, kafka.partitions(INPUT_TOPIC),
                                       as_function("ingest", ingest.handler), config)
        scheduler = FlushScheduler(as_function("flush", flush.handler), config.flush_invocation_s)
        scheduler.start()

        def repair_dead_letter() -> None:
            if dead_letter_dir.is_file():
                dead_letter_dir.unlink()
                dead_letter_dir.mkdir()

        try:
            with Progress(TextColumn("{task.description:<24}", markup=False), BarColumn(bar_width=16), MofNCompleteColumn(),
                          TextColumn("{task.fields[note]}", markup=False), TimeElapsedColumn(), console=console,
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
        tracing.flush()
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
        "batches_file": str(write_batches(batches, workdir / "batches.jsonl")),
        "dead_letter_file": str(dead_letter_path),
        "sample_batch": sample_batch(batches),
    }
    print_summary(console, summary)
    del kafka
    return DemoResult(result, summary)


def write_batches(batches: list[OutBatch], path: Path) -> Path:
    """Every batch message read back, one JSON document a line, in the order read."""
    with path.open("w", encoding="utf-8") as out:
        for batch in batches:
            out.write(json.dumps(batch.message, sort_keys=True) + "\n")
    return path


def sample_batch(batches: list[OutBatch]) -> dict | None:
    """The batch to show: the smallest with more than one member (short enough to read whole,
    and it shows items coalescing), else the smallest."""
    if not batches:
        return None
    def size(batch: OutBatch) -> int:
        return len(batch.message.get("members", []))

    several = [b for b in batches if size(b) > 1]
    return min(several or batches, key=size).message


def _read_jsonl(path: Path) -> list[dict]:
    from consolidator.support import jsonlines

    return jsonlines.read(path)


def batch_preview(message: dict, shown: int = 3) -> list[str]:
    """One line per field of a batch message; a list shows its length and first ``shown`` entries."""
    lines = []
    for key, value in message.items():
        if isinstance(value, list):
            head = ", ".join(json.dumps(v, sort_keys=True) for v in value[:shown])
            more = f", ... {len(value) - shown} more" if len(value) > shown else ""
            lines.append(f"  {key} ({len(value)}): [{head}{more}]")
        else:
            lines.append(f"  {key}: {json.dumps(value)}")
    return lines


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
    if s["sample_batch"] is not None:
        sample = s["sample_batch"]
        console.print(f"one of the {s['batches_out']} batches (every batch is in {s['batches_file']}, whole; the"
                      f" dead letter in {s['dead_letter_file']}):", highlight=False)
        for line in batch_preview(sample):
            console.print(line, soft_wrap=True)
    if s["passed"]:
        console.print("invariant check passed", style="bold green", end="")
        console.print(": every valid event is in exactly one batch id "
                      "(or coalesced into a newer one that is), every poison message is in the dead letter, "
                      f"no event under two batch ids, every batch out within {s['latency_bound_s']}s of its "
                      "first ingest")
    else:
        console.print("invariant check FAILED", style="bold red")
        for problem in s["problems"]:
            console.print(f"  - {problem}")
        console.print(f"work files kept in {s['workdir']}", highlight=False)
