"""Ingest benchmark: MSK-shaped records through the ingest service into MariaDB.

Baselines measured in the same run, into the same (emptied) table:
- LOAD DATA LOCAL INFILE of the same rows: the physical floor;
- one upsert + commit per record: the seed design's shape.
The service runs on the same events as JSON and as Avro (Confluent wire format, one schema from an
in-memory registry: the lookup is cached per schema id, so a registry's latency is not part of a
run); the target is Avro at >= 0.8x the JSON records/s.
The services (the generic shape's too) and LOAD DATA run --repeat times, alternating, and the
fastest run of each counts (the machine may be shared). Around each timed phase it samples the database server's CPU from /proc (server_cpu.py) and
this process's own CPU (the Lambda side), and after the service phase it counts the rows of
replay-protection state. Prints a table of figures, then one JSON line with
ratio_vs_load_data, ratio_vs_per_record, server CPU per record and replay_state_rows.
With --variants it also times each fast path against the exact one it stands for, in the same
run: the service with its pipelined store against the exact path alone (``pipeline_rows=0``),
alternating with the others (quiet machines only: the pipeline overlaps the client's work with
the server's, which a second busy core hides); and, per record (client CPU, the fastest of
three): the JSON decode (``decode`` against
``decode_exact``) and the MSK event reader (inline against ``parse_event(exact=True)``). Their
ratios (fast / exact time, below 1 pays) are in the JSON line under ``variants``.
Not part of the test suite: `make bench-ingest` (`BENCH_ARGS=--variants`).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import fastavro
import pymysql
from generic import GENERIC_NAMES, GENERIC_RECORDS, generic_record
from server_cpu import ServerCpu, per_record_us

from consolidator.rules.clock import SystemClock
from consolidator.rules.events import FieldNames, KafkaRecord, decode, decode_exact
from consolidator.services.ingest import PIPELINE_ROWS, IngestService
from consolidator.sinks.deadletter import FileDeadLetter
from consolidator.sources.formats import RegistryValueDecoder, decode_event
from consolidator.sources.formats.base import RegisteredSchema
from consolidator.sources.msk import event_from_records, parse_event
from consolidator.store.databases import drop_owned_database, recreate_owned_database
from consolidator.store.mysql import ConnectionParams, MySQLStore

T0 = 1_795_000_000_000
BENCH_CREATOR = "consolidator bench"  # the ownership marker of the bench's databases
COLUMNS = ("bucket, group_key, item_id, pos_key, src_topic, src_partition, src_offset, record_ts_ms, items,"
           " first_seen_ms, last_update_ms")


def load_data_store(params: ConnectionParams) -> MySQLStore:
    """A fresh bench database at the current schema (refusing one the bench did not create), with
    ``LOAD DATA LOCAL INFILE`` allowed for the physical-floor baseline."""
    recreate_owned_database(params, BENCH_CREATOR, T0)
    with pymysql.connect(host=params.host, port=params.port, user=params.user, password=params.password,
                         autocommit=True) as admin, admin.cursor() as cur:
        cur.execute("SET GLOBAL local_infile = 1")
    store = MySQLStore(params, local_infile=True)
    store.migrate(T0)
    return store


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


AVRO_SCHEMA = {"type": "record", "name": "Order", "fields": [
    {"name": "location_id", "type": "string"}, {"name": "order_id", "type": "string"},
    {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
        {"name": "sku", "type": "string"}, {"name": "quantity", "type": "long"}]}}}]}
AVRO_SCHEMA_ID = 1


class InMemorySchemas:
    """A registry that holds the one Avro schema (consolidator.sources.formats.decoder.SchemaSource)."""

    def schema(self, schema_id: str, protobuf: bool, subjects: frozenset[str], timeout_s: float) -> RegisteredSchema:
        return RegisteredSchema("AVRO", json.dumps(AVRO_SCHEMA))


def avro_values() -> RegistryValueDecoder:
    return RegistryValueDecoder("avro", InMemorySchemas())


def as_avro(records: list[KafkaRecord]) -> list[KafkaRecord]:
    """The same records with each value in Avro, framed as Confluent's serializers frame it."""
    parsed, header = fastavro.parse_schema(AVRO_SCHEMA), b"\x00" + AVRO_SCHEMA_ID.to_bytes(4, "big")
    encoded: dict[bytes, bytes] = {}
    for r in records:
        if r.value not in encoded:
            out = io.BytesIO()
            fastavro.schemaless_writer(out, parsed, json.loads(r.value))
            encoded[r.value] = header + out.getvalue()
    return [r._replace(value=encoded[r.value]) for r in records]


def row_of(record: KafkaRecord, now: int) -> tuple:
    e = decode(record, FieldNames(), 256 * 1024)
    items = json.dumps([list(i) for i in e.items], separators=(",", ":"))
    return (e.bucket, e.group_key, e.item_id, e.position.sort_key(), e.position.topic, e.position.partition,
            e.position.offset, e.timestamp_ms, items, now, now)


def reset(store: MySQLStore) -> None:
    with store.transaction() as cur:
        for table in ("buffer_rows", "partition_offsets", "applied_positions", "batches"):
            cur.execute(f"TRUNCATE TABLE {table}")


def run_service(store: MySQLStore, records: list[KafkaRecord], batch_size: int, dlq_dir: str,
                names: FieldNames | None = None, values: RegistryValueDecoder | None = None,
                pipeline_rows: int = PIPELINE_ROWS) -> float:
    """The ingest service over ``records`` (field ``names``; values in ``values``' format, None:
    JSON), in MSK events of ``batch_size``; a new service, so a new schema cache, each run.
    ``pipeline_rows`` 0: the exact path only."""
    return run_service_timed(store, records, batch_size, dlq_dir, names, values, pipeline_rows)[0]


def run_service_timed(store: MySQLStore, records: list[KafkaRecord], batch_size: int, dlq_dir: str,
                      names: FieldNames | None = None, values: RegistryValueDecoder | None = None,
                      pipeline_rows: int = PIPELINE_ROWS) -> tuple[float, float]:
    """:func:`run_service`'s seconds, and the CPU seconds of this process meanwhile (the client's
    work, its threads included; not the database server's, and not what other processes on a
    shared machine take)."""
    service = IngestService(store, FileDeadLetter(Path(dlq_dir) / "dlq.jsonl"),
                            names or FieldNames(), 256 * 1024, SystemClock(), values=values,
                            pipeline_rows=pipeline_rows)
    events = [event_from_records(records[i:i + batch_size]) for i in range(0, len(records), batch_size)]
    started, cpu = time.perf_counter(), time.process_time()
    for event in events:
        if service.handle_msk_event(event)["batchItemFailures"]:
            raise SystemExit("ingest reported failures during the benchmark")
    return time.perf_counter() - started, time.process_time() - cpu


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


def _cpu_us(run, count: int, repeat: int = 3) -> float:
    """Client CPU per record of ``run()``, the fastest of ``repeat`` runs."""
    best = None
    for _ in range(repeat):
        started = time.process_time()
        run()
        spent = time.process_time() - started
        best = spent if best is None else min(best, spent)
    return round(best * 1e6 / count, 3)


def measure_variants(records: list[KafkaRecord], batch_size: int, results: dict[str, float]) -> dict:
    """Each fast path against the exact one, in this run: time ratios fast / exact (below 1 pays)."""
    names, limit = FieldNames(), 256 * 1024
    events = [event_from_records(records[i:i + batch_size]) for i in range(0, len(records), batch_size)]
    pairs = {
        "decode": (lambda: [decode(r, names, limit) for r in records],
                   lambda: [decode_exact(r, names, limit) for r in records], len(records)),
        "msk_reader": (lambda: [parse_event(e) for e in events],
                       lambda: [parse_event(e, exact=True) for e in events], len(records)),
    }
    figures = {}
    for name, (fast, exact, count) in pairs.items():
        fast_us, exact_us = _cpu_us(fast, count), _cpu_us(exact, count)
        figures[name] = {"fast_us_per_record": fast_us, "exact_us_per_record": exact_us,
                         "fast_over_exact": round(fast_us / exact_us, 3)}
    figures["ingest_pipelined"] = {"pipelined_records_per_s": round(results["service"]),
                                   "exact_records_per_s": round(results["service_exact"]),
                                   "pipelined_over_exact": round(results["service"] / results["service_exact"], 3)}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=1_000, help="records per MSK invocation")
    parser.add_argument("--repeat", type=int, default=2,
                        help="runs of the service and LOAD DATA, alternating; the fastest of each counts")
    parser.add_argument("--per-record-sample", type=int, default=10_000,
                        help="records timed for the per-record baseline (its throughput is per record)")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL",
                                                                 "mysql://root:@127.0.0.1:3306/consolidator_bench"))
    parser.add_argument("--save", type=Path, help="also write the JSON line to this file (for bench/capacity.py)")
    parser.add_argument("--variants", action="store_true",
                        help="also time each fast path against its exact one (see above)")
    args = parser.parse_args()

    params = ConnectionParams.from_url(args.database_url)
    store = load_data_store(params)

    records = make_records(args.records, args.groups)
    avro_records = as_avro(records)
    rows = [row_of(r, T0) for r in records]
    with store.transaction() as cur:
        cpu = ServerCpu(cur)
        cpu.watch(cur)
    results, server, client = {}, {}, {}
    # the generic shape (bench/generic.py): ~1 KB events, full payload, four outputs; a smaller
    # run, alternating with the others like them, the fastest counting
    rng = random.Random(11)
    generic = [generic_record(r, rng) for r in records[:GENERIC_RECORDS]]
    phases = [("service", lambda: run_service(store, records, args.batch_size, tmp)),
              ("service_avro", lambda: run_service(store, avro_records, args.batch_size, tmp, values=avro_values())),
              ("load_data", lambda: run_load_data(store, rows, tmp)),
              ("generic", lambda: run_service(store, generic, args.batch_size, tmp, GENERIC_NAMES)),
              *([("service_exact", lambda: run_service(store, records, args.batch_size, tmp, pipeline_rows=0))]
                if args.variants else [])] * args.repeat
    phases.append(("per_record", lambda: run_per_record(store, rows[: args.per_record_sample])))
    with tempfile.TemporaryDirectory() as tmp:
        for name, run in phases:
            reset(store)
            count = {"per_record": args.per_record_sample, "generic": len(generic)}.get(name, len(records))
            before, cpu_before = cpu.sample(), time.process_time()
            seconds = run()
            run_server = per_record_us(before, cpu.sample(), count)
            run_client = round((time.process_time() - cpu_before) * 1e6 / count, 2)
            print(f"{name:>11}: {count:>7} records in {seconds:7.2f} s = {count / seconds:>9.0f} records/s;"
                  f" server CPU {run_server['process']} us/record (its thread {run_server['thread']}),"
                  f" client CPU {run_client} us/record", file=sys.stderr)
            if count / seconds <= results.get(name, 0):
                continue
            results[name], server[name], client[name] = count / seconds, run_server, run_client
            if name == "service":
                state = store.replay_state_rows()
                with store.transaction() as cur:
                    cur.execute("ANALYZE TABLE buffer_rows")
                    cur.fetchall()
                    cur.execute("SELECT DATA_LENGTH + INDEX_LENGTH AS bytes FROM information_schema.TABLES"
                                " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'buffer_rows'")
                    table_bytes = int(cur.fetchone()["bytes"])
                    cur.execute("SELECT COUNT(*) AS n FROM buffer_rows")
                    buffer_rows = int(cur.fetchone()["n"])
    decode_us = {}
    for label, function in (("fast", decode), ("exact", decode_exact)):
        started = time.process_time()
        for r in records:
            function(r, FieldNames(), 256 * 1024)
        decode_us[label] = round((time.process_time() - started) * 1e6 / len(records), 2)
    values, started = avro_values(), time.process_time()
    for r in avro_records:
        decode_event(values, r, FieldNames(), 256 * 1024)
    decode_us["avro"] = round((time.process_time() - started) * 1e6 / len(records), 2)

    def ratio(a, b):
        return None if a is None or b is None or not b else round(a / b, 2)

    variants = measure_variants(records, args.batch_size, results) if args.variants else None

    figures = {
        "records": len(records), "groups": args.groups, "batch_size": args.batch_size, "repeat": args.repeat,
        "partitions": len({r.partition for r in records}),
        "service_records_per_s": round(results["service"]),
        "load_data_records_per_s": round(results["load_data"]),
        "per_record_records_per_s": round(results["per_record"]),
        "avro_service_records_per_s": round(results["service_avro"]),
        "avro_ratio_vs_json": round(results["service_avro"] / results["service"], 3),
        "ratio_vs_load_data": round(results["service"] / results["load_data"], 3),
        "ratio_vs_per_record": round(results["service"] / results["per_record"], 2),
        "generic_records": len(generic),
        "generic_records_per_s": round(results["generic"]),
        "generic_ratio_vs_service": round(results["generic"] / results["service"], 3),
        "server_cpu_us_per_record": server["service"]["process"],
        "load_data_server_cpu_us_per_record": server["load_data"]["process"],
        "per_record_server_cpu_us_per_record": server["per_record"]["process"],
        "server_cpu_ratio_vs_load_data": ratio(server["service"]["process"], server["load_data"]["process"]),
        "server_thread_cpu_us_per_record": server["service"]["thread"],
        "load_data_server_thread_cpu_us_per_record": server["load_data"]["thread"],
        "server_thread_cpu_ratio_vs_load_data": ratio(server["service"]["thread"], server["load_data"]["thread"]),
        "client_cpu_us_per_record": client["service"],
        "avro_client_cpu_us_per_record": client["service_avro"],
        "decode_us_per_record": decode_us["fast"],
        "decode_exact_us_per_record": decode_us["exact"],
        "decode_avro_us_per_record": decode_us["avro"],
        "replay_state_rows": state["marks"] + state["applied_positions"],
        "distinct_positions": len({r.position for r in records}),
        "buffer_rows": buffer_rows,
        "buffer_bytes_per_row": round(table_bytes / buffer_rows),
        **({"variants": variants} if variants else {}),
        "targets": {"ratio_vs_load_data": 0.5, "avro_ratio_vs_json": 0.8, "ratio_vs_per_record": 5, "server_cpu_ratio_vs_load_data": 1.5,
                    "replay_state_rows": "partitions + a constant"},
    }
    store.close()
    drop_owned_database(params, BENCH_CREATOR)
    print(json.dumps(figures))
    if args.save:
        args.save.write_text(json.dumps(figures) + "\n")


if __name__ == "__main__":
    main()
