"""Tracing benchmark: the ingest service of bench_ingest.py with tracing off and on.

Three runs of the same MSK-shaped records into MariaDB, alternating --repeat times, the fastest of
each counting (the machine may be shared):
- off: tracing off, records without trace headers (what bench-ingest measures);
- off_headers: tracing off, every record with a ``traceparent`` header (a new context every
  --records-per-context records, as producer spans would give): the cost of keeping contexts;
- on: the same records, tracing on (the SDK's TracerProvider and BatchSpanProcessor, as
  ``OTEL_TRACES_EXPORTER=otlp`` configures them, with an exporter that drops the spans: the
  SDK's cost, not a collector's).
Prints a line per run, then one JSON line: records/s of each and the ratios on/off_headers (the
tracing cost, target >= 0.95) and off_headers/off; and the client's CPU microseconds per record of
each (the fewest of its runs: this process's CPU time, which other processes on a shared machine
do not inflate as they do the wall time; not the database server's) and their ratios.
Not part of the test suite: `make bench-tracing`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from bench_ingest import BENCH_CREATOR, T0, make_records, reset, run_service_timed
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from consolidator.store.databases import drop_owned_database, recreate_owned_database
from consolidator.store.mysql import ConnectionParams, MySQLStore
from consolidator.support import tracing


class Dropped(SpanExporter):
    """Takes the spans and drops them."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def with_contexts(records, per_context: int):
    return [r._replace(headers=(("traceparent", f"00-{i // per_context + 1:032x}-{i // per_context + 1:016x}-01"
                                 .encode()),)) for i, r in enumerate(records)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=1_000, help="records per MSK invocation")
    parser.add_argument("--records-per-context", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL",
                                                                 "mysql://root@127.0.0.1:3306/consolidator_bench_tracing"))
    args = parser.parse_args()

    params = ConnectionParams.from_url(args.database_url)
    recreate_owned_database(params, BENCH_CREATOR, T0)
    store = MySQLStore(params)
    store.migrate(T0)
    plain = make_records(args.records, args.groups)
    traced = with_contexts(plain, args.records_per_context)
    exporter = Dropped()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    results: dict[str, float] = {}
    cpu: dict[str, float] = {}  # microseconds per record
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.repeat):
                for name, records, on in (("off", plain, False), ("off_headers", traced, False), ("on", traced, True)):
                    reset(store)
                    tracing.install(provider if on else None)
                    seconds, cpu_seconds = run_service_timed(store, records, args.batch_size, tmp)
                    tracing.install(None)
                    rate, per_record = len(records) / seconds, cpu_seconds / len(records) * 1e6
                    print(f"{name:>11}: {len(records)} records in {seconds:6.2f} s = {rate:8.0f} records/s;"
                          f" client CPU {per_record:5.2f} us/record", file=sys.stderr)
                    results[name] = max(results.get(name, 0.0), rate)
                    cpu[name] = min(cpu.get(name, float("inf")), per_record)
        provider.force_flush()
        provider.shutdown()
    finally:
        store.close()
        drop_owned_database(params, BENCH_CREATOR)
    figures = {"benchmark": "tracing", "records": args.records, "batch_size": args.batch_size,
               "records_per_context": args.records_per_context, "repeat": args.repeat,
               "spans_exported": exporter.spans,
               **{f"{name}_records_per_s": round(rate) for name, rate in results.items()},
               "ratio_on_vs_off_headers": round(results["on"] / results["off_headers"], 3),
               "ratio_off_headers_vs_off": round(results["off_headers"] / results["off"], 3),
               "ratio_on_vs_off": round(results["on"] / results["off"], 3),
               **{f"{name}_cpu_us_per_record": round(value, 2) for name, value in cpu.items()},
               "cpu_ratio_on_vs_off_headers": round(cpu["on"] / cpu["off_headers"], 3),
               "cpu_ratio_off_headers_vs_off": round(cpu["off_headers"] / cpu["off"], 3)}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
