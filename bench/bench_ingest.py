"""Ingest benchmark: MSK-shaped records through the ingest service into MariaDB.

Baselines measured in the same run, into the same (emptied) table:
- LOAD DATA LOCAL INFILE of the same rows: the physical floor;
- one upsert + commit per record: the seed design's shape.
Prints a table of figures, then one JSON line with ratio_vs_load_data and ratio_vs_per_record.
Not part of the test suite: `make bench-ingest`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time

import pymysql

from consolidator.clock import SystemClock
from consolidator.deadletter import FileDeadLetter
from consolidator.events import FieldNames, KafkaRecord, decode
from consolidator.msk import event_from_records
from consolidator.services.ingest import IngestService
from consolidator.store.mysql import ConnectionParams, MySQLStore

T0 = 1_795_000_000_000
COLUMNS = ("bucket, group_key, item_id, pos_key, src_topic, src_partition, src_offset, record_ts_ms, items,"
           " first_seen_ms, last_update_ms")


def make_records(n: int, groups: int, seed: int = 7) -> list[KafkaRecord]:
    """``n`` records over ``groups`` groups: 10% repeat an earlier item, 1% replay an earlier record."""
    rng = random.Random(seed)
    records: list[KafkaRecord] = []
    offsets = [0] * 6
    items_seen: list[tuple[str, str]] = []
    while len(records) < n:
        if records and rng.random() < 0.01:
            records.append(rng.choice(records))
            continue
        if items_seen and rng.random() < 0.10:
            group, item = rng.choice(items_seen)
        else:
            group, item = f"WH-{rng.randrange(groups):03d}", f"O{len(records):07d}"
            items_seen.append((group, item))
        partition = rng.randrange(len(offsets))
        offsets[partition] += 1
        value = json.dumps({"location_id": group, "order_id": item,
                            "items": [{"sku": f"SKU-{rng.randrange(50)}", "quantity": rng.randint(1, 9)}]}).encode()
        records.append(KafkaRecord("orders", partition, offsets[partition], T0 + len(records), group.encode(), value))
    return records


def row_of(record: KafkaRecord, now: int) -> tuple:
    e = decode(record, FieldNames(), 256 * 1024)
    items = json.dumps([list(i) for i in e.items], separators=(",", ":"))
    return (e.bucket, e.group_key, e.item_id, e.position.sort_key(), e.position.topic, e.position.partition,
            e.position.offset, e.timestamp_ms, items, now, now)


def reset(store: MySQLStore) -> None:
    with store.transaction() as cur:
        for table in ("buffer_rows", "ingested_positions", "batches"):
            cur.execute(f"TRUNCATE TABLE {table}")


def run_service(store: MySQLStore, records: list[KafkaRecord], batch_size: int, dlq_dir: str) -> float:
    service = IngestService(store, FileDeadLetter(__import__("pathlib").Path(dlq_dir) / "dlq.jsonl"),
                            FieldNames(), 256 * 1024, SystemClock())
    events = [event_from_records(records[i:i + batch_size]) for i in range(0, len(records), batch_size)]
    started = time.perf_counter()
    for event in events:
        if service.handle_msk_event(event)["batchItemFailures"]:
            raise SystemExit("ingest reported failures during the benchmark")
    return time.perf_counter() - started


def run_load_data(store: MySQLStore, rows: list[tuple], tmp: str) -> float:
    path = os.path.join(tmp, "rows.tsv")

    def field(v):
        return v.hex() if isinstance(v, bytes) else str(v)

    with open(path, "w") as out:
        out.writelines("\t".join(field(v) for v in row) + "\n" for row in rows)
    started = time.perf_counter()
    with store.transaction() as cur:
        cur.execute(
            "LOAD DATA LOCAL INFILE %s IGNORE INTO TABLE buffer_rows (bucket, group_key, item_id, @pos,"
            " src_topic, src_partition, src_offset, record_ts_ms, items, first_seen_ms, last_update_ms)"
            " SET pos_key = UNHEX(@pos)", (path,))
    return time.perf_counter() - started


def run_per_record(store: MySQLStore, rows: list[tuple]) -> float:
    """The seed design: one upsert and one commit per record, pending-only update."""
    statement = (f"INSERT INTO buffer_rows ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                 " ON DUPLICATE KEY UPDATE items = IF(status = 'PENDING', VALUES(items), items),"
                 " last_update_ms = IF(status = 'PENDING', VALUES(last_update_ms), last_update_ms)")
    started = time.perf_counter()
    for row in rows:
        with store.transaction() as cur:
            cur.execute(statement, row)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=1_000, help="records per MSK invocation")
    parser.add_argument("--per-record-sample", type=int, default=10_000,
                        help="records timed for the per-record baseline (its throughput is per record)")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL",
                                                                 "mysql://root:@127.0.0.1:3306/consolidator_bench"))
    args = parser.parse_args()

    params = ConnectionParams.from_url(args.database_url)
    with pymysql.connect(host=params.host, port=params.port, user=params.user, password=params.password,
                         autocommit=True) as admin, admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {params.database}")
        cur.execute(f"CREATE DATABASE {params.database} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        cur.execute("SET GLOBAL local_infile = 1")
    store = MySQLStore(params, local_infile=True)
    store.migrate(T0)

    records = make_records(args.records, args.groups)
    rows = [row_of(r, T0) for r in records]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, run in (
            ("service", lambda: run_service(store, records, args.batch_size, tmp)),
            ("load_data", lambda: run_load_data(store, rows, tmp)),
            ("per_record", lambda: run_per_record(store, rows[: args.per_record_sample])),
        ):
            reset(store)
            count = args.per_record_sample if name == "per_record" else len(records)
            seconds = run()
            results[name] = count / seconds
            print(f"{name:>11}: {count:>7} records in {seconds:7.2f} s = {count / seconds:>9.0f} records/s",
                  file=sys.stderr)
    figures = {
        "records": len(records), "groups": args.groups, "batch_size": args.batch_size,
        "service_records_per_s": round(results["service"]),
        "load_data_records_per_s": round(results["load_data"]),
        "per_record_records_per_s": round(results["per_record"]),
        "ratio_vs_load_data": round(results["service"] / results["load_data"], 3),
        "ratio_vs_per_record": round(results["service"] / results["per_record"], 2),
        "targets": {"ratio_vs_load_data": 0.5, "ratio_vs_per_record": 5},
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
