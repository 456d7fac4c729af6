"""Flush benchmark: drain PENDING rows in due groups through the flush service.

Default: 100,000 rows in 200 groups (500 rows each = max_batch_size, so every group is due),
drained to the file sink and to the librdkafka mock-cluster Kafka sink.
Baseline measured in the same run on the same rows: the bare SQL work, i.e. read the rows'
payloads and update their status in chunks of max_batch_size, one transaction per chunk.
Around each run it samples the database server's CPU from /proc (server_cpu.py) and this
process's own CPU (the flusher's side).
Prints a table of figures, then one JSON line including ratio_vs_sql_floor (file sink).
With the rate limit off (the default) those figures are unchanged. One more variant,
``file_limited``: the same drain with a rate limit on half the groups (one override per group,
1 batch per minute; every claim of those groups locks, checks and updates the group's rate state
in its own transaction; the state rows exist, as they do after a group's first limited claim). ``limited_ratio`` is
its throughput over the unlimited file run (target >= 0.9: the limit must not cost the flush its
speed). The TTL is off in every variant (the rows' record timestamps are fixed in the past).
Last, a small ``generic`` drain (bench/generic.py: about 1 KB events, each member carrying its
event, four outputs) of ``--generic-rows`` rows to the file sink, after the default rows are gone,
--repeat times (every row PENDING again before each run), the best counting:
``generic_ratio_vs_file`` is its rows/s over the default file drain's.
Not part of the test suite: `make bench-flush` (`--quick` for a 10x smaller run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from generic import GENERIC_NAMES, GENERIC_RECORDS, generic_record
from server_cpu import ServerCpu, per_record_us

from consolidator.rules.clock import ManualClock
from consolidator.rules.events import (
    DEFAULT_NAMES,
    Event,
    FieldNames,
    KafkaRecord,
    SourcePosition,
    decode,
)
from consolidator.rules.policy import Policy, RateLimit
from consolidator.services.flush import FlushService
from consolidator.sinks import Sink
from consolidator.sinks.deadletter import FileDeadLetter
from consolidator.sinks.file import FileSink
from consolidator.sinks.kafka import KafkaSink
from consolidator.store.databases import drop_owned_database, recreate_owned_database
from consolidator.store.mysql import ConnectionParams, MySQLStore

T0 = 1_795_000_000_000
BENCH_CREATOR = "consolidator bench"  # the ownership marker of the bench's databases
TARGET = 0.9  # one row write per flushed row, as the floor
LIMITED_TARGET = 0.9


def make_events(rows: int, groups: int) -> list[Event]:
    """``rows`` distinct items spread evenly over ``groups`` groups, two skus each."""
    events = []
    for i in range(rows):
        group = f"WH-{i % groups:04d}"
        payload = json.dumps({"location_id": group, "order_id": f"O{i:08d}",
                              "items": [{"sku": f"SKU-{i % 50}", "quantity": 1 + i % 9},
                                        {"sku": f"SKU-{(i + 7) % 50}", "quantity": 2}]}).encode()
        events.append(Event(SourcePosition("orders", i % 6, i // 6), T0 + i, group, f"O{i:08d}",
                            ((f"SKU-{i % 50}", 1 + i % 9), (f"SKU-{(i + 7) % 50}", 2)), payload))
    return events


def reset_to_pending(store: MySQLStore) -> None:
    """Undo a drain: every row PENDING again, no batches (benchmark set-up, not timed)."""
    with store.transaction() as cur:
        cur.execute("UPDATE buffer_rows SET status = 'PENDING', batch_id = ''")
        cur.execute("DELETE FROM batches")
        # rate state rows stay (created by a group's first limited claim ever): steady state
        cur.execute("UPDATE group_rate_state SET recent_ms = '', throttled_since_ms = NULL, throttled_until_ms = NULL")


def sql_floor(store: MySQLStore, batch_size: int) -> tuple[float, int]:
    """Bare SQL on the same rows: read payloads, update status, one transaction per chunk."""
    started = time.perf_counter()
    chunks = 0
    with store.transaction() as cur:
        cur.execute("SELECT DISTINCT group_key FROM buffer_rows WHERE status = 'PENDING' ORDER BY group_key")
        groups = [r["group_key"] for r in cur.fetchall()]
    for group in groups:
        while True:
            with store.transaction() as cur:
                cur.execute(
                    "SELECT id, bucket, items, src_topic, src_partition, src_offset FROM buffer_rows"
                    " WHERE status = 'PENDING' AND group_key = %s ORDER BY first_seen_ms, pos_key LIMIT %s",
                    (group, batch_size),
                )
                rows = cur.fetchall()
                if rows:
                    payloads = [json.loads(r["items"]) for r in rows]
                    assert len(payloads) == len(rows)
                    pairs = [v for r in rows for v in (r["id"], r["bucket"])]
                    cur.execute(
                        "UPDATE buffer_rows SET status = 'SENT' WHERE status = 'PENDING' AND (id, bucket) IN ("
                        + ", ".join(["(%s, %s)"] * len(rows)) + ")",
                        pairs,
                    )
                    chunks += 1
            if len(rows) < batch_size:
                break
    return time.perf_counter() - started, chunks


def drain(store: MySQLStore, sink: Sink, policy: Policy, tmp: Path, rows: int,
          names: FieldNames = DEFAULT_NAMES) -> tuple[float, int]:
    clock = ManualClock(T0 + rows + policy.debounce_ms)
    service = FlushService(store=store, sink=sink, dead_letter=FileDeadLetter(tmp / "dead.jsonl"),
                           policy=policy, clock=clock, names=names, max_rows_per_tick=rows)
    started = time.perf_counter()
    batches = 0
    while True:
        report = service.tick()
        if report.publish_failures or report.dead:
            raise SystemExit(f"publish failures during the benchmark: {report}")
        if not report.published and not report.throttled:
            break
        batches += len(report.published)
        clock.advance(policy.tick_interval_ms)
    return time.perf_counter() - started, batches


def generic_drain(store: MySQLStore, events: list[Event], policy: Policy, tmp: Path,
                  runs: int, cpu: ServerCpu) -> list[tuple[float, dict, float]]:
    """The generic shape's drains: the default rows removed, ``events`` (re-shaped as generic
    ~1 KB events, on their own topic) stored and drained to the file sink under the shape,
    ``runs`` times (every row PENDING again before each): each run's seconds, server CPU and
    client CPU per row."""
    import random

    rng = random.Random(5)
    records = [generic_record(KafkaRecord("generic", e.position.partition, e.position.offset, e.timestamp_ms,
                                          None, e.payload), rng) for e in events]
    with store.transaction() as cur:
        for table in ("buffer_rows", "batches"):
            cur.execute(f"TRUNCATE TABLE {table}")
    shaped = [decode(r, GENERIC_NAMES, 256 * 1024) for r in records]
    for start in range(0, len(shaped), 5_000):
        store.ingest(shaped[start:start + 5_000], T0 + start)
    results = []
    for run in range(runs):
        reset_to_pending(store)
        before, cpu_before = cpu.sample(), time.process_time()
        seconds, _ = drain(store, FileSink(tmp / f"batches-generic-{run}.jsonl"), policy, tmp, len(shaped), GENERIC_NAMES)
        results.append((seconds, per_record_us(before, cpu.sample(), len(shaped)),
                        round((time.process_time() - cpu_before) * 1e6 / len(shaped), 2)))
        check_drained(store, len(shaped))
    return results


def check_drained(store: MySQLStore, rows: int) -> None:
    counts = store.row_counts()
    if counts != {"SENT": rows}:
        raise SystemExit(f"not drained: {counts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=500, help="max_batch_size")
    parser.add_argument("--quick", action="store_true", help="10,000 rows in 20 groups")
    parser.add_argument("--repeat", type=int, default=2, help="runs per variant; the best counts")
    parser.add_argument("--no-kafka", action="store_true", help="skip the mock-cluster Kafka sink")
    parser.add_argument("--generic-rows", type=int, default=GENERIC_RECORDS, help="rows of the generic drain")
    parser.add_argument("--database-url", default=os.environ.get(
        "BENCH_DATABASE_URL", "mysql://root:@127.0.0.1:3306/consolidator_bench_flush"))
    parser.add_argument("--save", type=Path, help="also write the JSON line to this file (for bench/capacity.py)")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.groups = 10_000, 20

    params = ConnectionParams.from_url(args.database_url)
    recreate_owned_database(params, BENCH_CREATOR, T0)  # refuses a database the bench did not create
    store = MySQLStore(params)
    store.migrate(T0)
    events = make_events(args.rows, args.groups)
    loading = time.perf_counter()
    for start in range(0, len(events), 5_000):
        store.ingest(events[start:start + 5_000], T0 + start)
    with store.transaction() as cur:  # the state rows of the groups the limited run limits
        cur.executemany("INSERT INTO group_rate_state (group_key, recent_ms, updated_at_ms) VALUES (%s, '', %s)",
                        [(f"WH-{group:04d}", T0) for group in range(0, args.groups, 2)])
    print(f"loaded {args.rows} PENDING rows in {args.groups} groups in {time.perf_counter() - loading:.1f} s",
          file=sys.stderr)
    policy = Policy(max_batch_size=args.batch_size)

    mock_owner = None
    variants = ["sql_floor", "file", "file_limited"]
    if not args.no_kafka:
        from confluent_kafka import Producer

        mock_owner = Producer({"test.mock.num.brokers": 3})
        bootstrap = ",".join(f"{b.host}:{b.port}" for b in mock_owner.list_topics(timeout=10).brokers.values())
        variants.append("kafka")

    best: dict[str, tuple[float, int]] = {}
    server: dict[str, dict] = {}
    client: dict[str, float] = {}
    with store.transaction() as cur:
        cpu = ServerCpu(cur)
        cpu.watch(cur)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for run in range(args.repeat):
            # every other run swaps the two file drains: neither always follows the other's reset
            order = variants if run % 2 == 0 else [
                {"file": "file_limited", "file_limited": "file"}.get(v, v) for v in variants]
            for name in order:
                reset_to_pending(store)
                before, cpu_before = cpu.sample(), time.process_time()
                if name == "sql_floor":
                    seconds, batches = sql_floor(store, args.batch_size)
                elif name == "file":
                    out = tmp / f"batches-{run}.jsonl"
                    seconds, batches = drain(store, FileSink(out), policy, tmp, args.rows)
                    written = sum(1 for _ in out.open())
                    if written != batches:
                        raise SystemExit(f"file sink has {written} lines for {batches} batches")
                elif name == "file_limited":
                    out = tmp / f"batches-limited-{run}.jsonl"
                    for group in range(0, args.groups, 2):
                        store.set_limit(f"WH-{group:04d}", RateLimit(1, 60_000), T0)
                    seconds, batches = drain(store, FileSink(out), policy, tmp, args.rows)
                    for group in range(0, args.groups, 2):
                        store.clear_limit(f"WH-{group:04d}")
                    if sum(1 for _ in out.open()) != batches:
                        raise SystemExit("limited run: file sink lines differ from batches")
                else:
                    sink = KafkaSink(bootstrap, f"bench-batches-{run}")
                    seconds, batches = drain(store, sink, policy, tmp, args.rows)
                    sink.close()
                run_server = per_record_us(before, cpu.sample(), args.rows)
                run_client = round((time.process_time() - cpu_before) * 1e6 / args.rows, 2)
                check_drained(store, args.rows)
                print(f"{name:>10} run {run + 1}: {args.rows} rows, {batches} batches in {seconds:6.2f} s"
                      f" = {args.rows / seconds:>8.0f} rows/s, {batches / seconds:>6.1f} batches/s;"
                      f" server CPU {run_server['process']} us/row (its thread {run_server['thread']}),"
                      f" client CPU {run_client} us/row", file=sys.stderr)
                if name not in best or seconds < best[name][0]:
                    best[name] = (seconds, batches)
                    server[name], client[name] = run_server, run_client

        generic_rows = min(args.generic_rows, args.rows)
        generic_runs = generic_drain(store, events[:generic_rows], policy, tmp, args.repeat, cpu)
        generic_s, generic_server, generic_client = min(generic_runs, key=lambda r: r[0])  # the best counts
        for run, (seconds, run_server, run_client) in enumerate(generic_runs):
            print(f"   generic run {run + 1}: {generic_rows} rows in {seconds:6.2f} s = {generic_rows / seconds:>8.0f}"
                  f" rows/s (~1 KB events, full payload, four outputs); server CPU {run_server['process']} us/row"
                  f" (its thread {run_server['thread']}), client CPU {run_client} us/row", file=sys.stderr)

    rate = {name: args.rows / seconds for name, (seconds, _) in best.items()}
    figures = {
        "rows": args.rows, "groups": args.groups, "max_batch_size": args.batch_size,
        "batches": best["file"][1],
        "sql_floor_rows_per_s": round(rate["sql_floor"]),
        "file_rows_per_s": round(rate["file"]),
        "file_batches_per_s": round(best["file"][1] / best["file"][0], 1),
        "ratio_vs_sql_floor": round(rate["file"] / rate["sql_floor"], 3),
        "server_cpu_us_per_row": server["file"]["process"],
        "sql_floor_server_cpu_us_per_row": server["sql_floor"]["process"],
        "server_thread_cpu_us_per_row": server["file"]["thread"],
        "sql_floor_server_thread_cpu_us_per_row": server["sql_floor"]["thread"],
        "client_cpu_us_per_row": client["file"],
    }
    if "kafka" in best:
        figures |= {
            "kafka_rows_per_s": round(rate["kafka"]),
            "kafka_batches_per_s": round(best["kafka"][1] / best["kafka"][0], 1),
            "kafka_ratio_vs_sql_floor": round(rate["kafka"] / rate["sql_floor"], 3),
        }
    figures |= {"generic_rows": generic_rows, "generic_rows_per_s": round(generic_rows / generic_s),
                "generic_ratio_vs_file": round(generic_rows / generic_s / rate["file"], 3),
                "generic_server_thread_cpu_us_per_row": generic_server["thread"],
                "generic_client_cpu_us_per_row": generic_client}
    figures["target_ratio_vs_sql_floor"] = TARGET
    figures["meets_target"] = figures["ratio_vs_sql_floor"] >= TARGET
    figures |= {
        "limited_groups": (args.groups + 1) // 2,
        "file_limited_rows_per_s": round(rate["file_limited"]),
        "limited_ratio": round(rate["file_limited"] / rate["file"], 3),
        "target_limited_ratio": LIMITED_TARGET,
        "meets_limited_target": rate["file_limited"] / rate["file"] >= LIMITED_TARGET,
    }
    store.close()
    drop_owned_database(params, BENCH_CREATOR)
    print(json.dumps(figures))
    if args.save:
        args.save.write_text(json.dumps(figures) + "\n")


if __name__ == "__main__":
    main()
