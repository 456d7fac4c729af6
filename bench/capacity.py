"""Capacity model of the Lambda path, the worker and the Spark path, computed from the
benchmarks' JSON lines.

    python bench/capacity.py --ingest bench/results/ingest-*.json --flush bench/results/flush-*.json \
        --worker bench/results/worker-*.json --stream bench/results/stream-*.json > docs/benchmarks/capacity.md

Each file holds the last line a benchmark printed (one JSON object). With several runs per
benchmark, every figure is the median of the runs, and the runs are listed. Nothing in the
output is typed by hand: change an assumption below and regenerate.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import cost

# Assumptions of the model (stated in the output).
HEADROOM = 0.5  # plan for half of a measured ceiling: bursts, retries, replays, vacuum-like work
LAMBDA_VCPU_MB = 1769  # Lambda gives one full vCPU at this memory size
DEBOUNCE_S = 300  # defaults of the settings (docs/semantics.md section 5)
HARD_WINDOW_S = 1800
BUFFER_POOL_GIB = 12  # e.g. an Aurora db.r6g.large (16 GiB): about three quarters for InnoDB
BUFFER_POOL_SHARE = 0.5  # the pending rows and their indexes should fit in this share of it
LOADED_ABOVE = 2  # a run whose load average ended above the machine's cores was shared (said in the output)


def _load(paths: list[Path]) -> list[dict]:
    return [json.loads(p.read_text().strip().splitlines()[-1]) for p in paths]


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def model(ingest: list[dict], flush: list[dict], server_cpu: str = "process") -> dict[str, float | None]:
    """Every derived figure, from the medians of the runs. ``server_cpu``: which server figure
    the derived rates use, the whole process's (right on a machine of its own) or the
    benchmark connection's thread (on a shared server, where the process also counts others)."""
    m = {key: _median(ingest, key) for key in (
        "server_cpu_us_per_record", "load_data_server_cpu_us_per_record", "server_thread_cpu_us_per_record",
        "client_cpu_us_per_record", "service_records_per_s", "ratio_vs_load_data", "buffer_bytes_per_row",
        "replay_state_rows", "decode_us_per_record", "decode_exact_us_per_record")}
    m |= {f"flush_{key}": _median(flush, key) for key in (
        "server_cpu_us_per_row", "sql_floor_server_cpu_us_per_row", "server_thread_cpu_us_per_row",
        "client_cpu_us_per_row", "file_rows_per_s", "file_batches_per_s", "kafka_rows_per_s",
        "kafka_batches_per_s", "ratio_vs_sql_floor", "max_batch_size")}
    if server_cpu == "thread":
        ingest_us, flush_us = m["server_thread_cpu_us_per_record"], m["flush_server_thread_cpu_us_per_row"]
    else:
        ingest_us, flush_us = m["server_cpu_us_per_record"], m["flush_server_cpu_us_per_row"]
    m["ingest_us"], m["flush_us"] = ingest_us, flush_us
    client_us = m["client_cpu_us_per_record"]
    m["poller_cpu_records_per_s"] = 1e6 / client_us if client_us else None
    m["ingest_events_per_vcpu_s"] = 1e6 / ingest_us if ingest_us else None
    m["flush_rows_per_vcpu_s"] = 1e6 / flush_us if flush_us else None
    m["both_events_per_vcpu_s"] = 1e6 / (ingest_us + flush_us) if ingest_us and flush_us else None
    measured = min(filter(None, (m["flush_file_rows_per_s"], m["flush_kafka_rows_per_s"])), default=None)
    flush_client = m["flush_client_cpu_us_per_row"]
    # The flusher waits for the database between its own steps: its rows/s is bounded by its CPU
    # plus the server's per row. On a shared machine the wall clock also measures the others.
    m["flusher_cpu_bound_rows_per_s"] = 1e6 / (flush_client + flush_us) if flush_client and flush_us else None
    m["poller_cpu_bound_records_per_s"] = 1e6 / (client_us + ingest_us) if client_us and ingest_us else None
    ceiling = measured if server_cpu == "process" else m["flusher_cpu_bound_rows_per_s"]
    m["flusher_ceiling_rows_per_s"] = ceiling
    m["switch_rate_events_per_s"] = ceiling * HEADROOM if ceiling else None
    row_bytes = m["buffer_bytes_per_row"]
    budget = BUFFER_POOL_GIB * 2**30 * BUFFER_POOL_SHARE
    m["pending_rows_budget"] = budget / row_bytes if row_bytes else None
    # Pending rows at a sustained rate: up to rate x hard window (distinct items, no coalescing).
    m["switch_rate_by_state_events_per_s"] = m["pending_rows_budget"] / HARD_WINDOW_S if row_bytes else None
    return m


def render(ingest: list[dict], flush: list[dict], sources: list[str], server_cpu: str = "process",
           stream: list[dict] | None = None, worker: list[dict] | None = None) -> str:
    m = model(ingest, flush, server_cpu)
    worker_rate = _median(worker or [], "worker_records_per_s")
    costs = cost.model(m, _median(stream or [], "events_per_s_per_core"), worker_rate)
    loads = [r["load_average"][0] for r in worker or [] if r.get("load_average")]
    loaded = (f" (under load: load average {max(loads):.0f} on {LOADED_ABOVE} cores; replace with quiet runs)"
              if loads and max(loads) > LOADED_ABOVE else "")
    if loaded:
        costs["worker_loaded_note"] = ("\n\nThe worker's figure was measured under load, the others on a quiet machine: its"
                                       " column is pessimistic until quiet runs replace it.")
    worker_note = "".join(f"\n| {label} | {value} |" for label, value in (
        ("worker: records/s stored by one `consolidator worker` (4 partitions, writes of 5,000)",
         f"{_fmt(worker_rate)} records/s{loaded}"),
        ("worker vs the ingest service, same records", _fmt(_median(worker or [], "ratio_vs_direct"), 3)),
        ("worker: resident memory, peak, draining a backlog",
         f"{_fmt(_median(worker or [], 'rss_peak_mb'))} MB"),
    )) if worker else ""
    ceiling_basis = "measured, the slower sink" if server_cpu == "process" else "from CPU: the wall clock was shared"
    basis = ("the whole `mariadbd` process's CPU" if server_cpu == "process" else
             "the CPU of the server thread serving the benchmark's connection (the machine was shared,"
             " so the process figure also counted other clients' work)")
    runs = "\n".join(f"- `{s}`" for s in sources)
    switch = min(filter(None, (m["switch_rate_events_per_s"], m["switch_rate_by_state_events_per_s"])), default=None)
    return f"""# Capacity and cost: the Lambda path, the worker and Spark

<!-- Generated by bench/capacity.py from the benchmark JSON below; do not edit by hand. -->

Figures are medians of {len(ingest)} ingest, {len(flush)} flush, {len(worker or [])} worker and {len(stream or [])} stream benchmark runs
(`make bench-ingest`, `make bench-flush`, `make bench-worker`, `make bench-stream`), all on one machine, so they are
ratios and orders of magnitude for sizing, not promises. Regenerate with `make capacity` after new runs.

## Measured

| figure | value |
|---|---|
| ingest throughput, one poller (wall clock, 1,000-record invocations) | {_fmt(m["service_records_per_s"])} records/s |
| ingest vs `LOAD DATA` (same run) | {_fmt(m["ratio_vs_load_data"], 3)} |
| database server CPU per ingested record | {_fmt(m["server_cpu_us_per_record"], 1)} us (`LOAD DATA`: {_fmt(m["load_data_server_cpu_us_per_record"], 1)} us) |
| of that, the ingest connection's own thread | {_fmt(m["server_thread_cpu_us_per_record"], 1)} us |
| ingest function CPU per record (decode, SQL text, driver) | {_fmt(m["client_cpu_us_per_record"], 1)} us |
| decode per record: fast path / exact path | {_fmt(m["decode_us_per_record"], 2)} / {_fmt(m["decode_exact_us_per_record"], 2)} us |
| replay-protection rows after 100,000 records on 6 partitions | {_fmt(m["replay_state_rows"])} |
| buffer bytes per row (data + indexes) | {_fmt(m["buffer_bytes_per_row"])} |
| database server CPU per flushed row | {_fmt(m["flush_server_cpu_us_per_row"], 1)} us (bare SQL floor: {_fmt(m["flush_sql_floor_server_cpu_us_per_row"], 1)} us) |
| flush function CPU per row | {_fmt(m["flush_client_cpu_us_per_row"], 1)} us |
| single flusher, file sink | {_fmt(m["flush_file_rows_per_s"])} rows/s, {_fmt(m["flush_file_batches_per_s"], 1)} batches/s of {_fmt(m["flush_max_batch_size"])} rows |
| single flusher, Kafka sink (librdkafka mock cluster) | {_fmt(m["flush_kafka_rows_per_s"])} rows/s, {_fmt(m["flush_kafka_batches_per_s"], 1)} batches/s |
| flush vs the bare SQL floor (file sink) | {_fmt(m["flush_ratio_vs_sql_floor"], 3)} |{worker_note}

## Derived

Server cost used below: {_fmt(m["ingest_us"], 1)} us per ingested event and {_fmt(m["flush_us"], 1)} us per
flushed row, from {basis}.

| question | answer |
|---|---|
| events/s one Aurora writer vCPU can ingest | {_fmt(m["ingest_events_per_vcpu_s"])} |
| rows/s one writer vCPU can flush | {_fmt(m["flush_rows_per_vcpu_s"])} |
| events/s per writer vCPU, ingested and flushed (no coalescing) | {_fmt(m["both_events_per_vcpu_s"])} |
| records/s one ingest poller can decode and send, by its own CPU (1 vCPU) | {_fmt(m["poller_cpu_records_per_s"])} |
| records/s one ingest poller sustains, its CPU plus the server's per record (sequential) | {_fmt(m["poller_cpu_bound_records_per_s"])} |
| the single flusher's ceiling, from its CPU plus the server's per row | {_fmt(m["flusher_cpu_bound_rows_per_s"])} rows/s |
| **the single flusher's ceiling used below** ({ceiling_basis}) | **{_fmt(m["flusher_ceiling_rows_per_s"])} rows/s** |
| pending rows that fit the buffer-pool budget | {_fmt(m["pending_rows_budget"])} |
| **switch to the Spark path above** | **{_fmt(switch)} events/s sustained**, or when more than {_fmt(m["pending_rows_budget"])} rows are pending |

How to read it: a writer with N vCPUs ingests and flushes about N x
{_fmt(m["both_events_per_vcpu_s"])} events/s at 100% CPU; plan for {HEADROOM:.0%} of that. Ingest
scales out with partitions (one poller per partition), so the ingest side is bounded by the
writer; the flush side is one function (reserved concurrency 1) and is bounded by the
flusher's ceiling whatever the writer's size. The switch rate is the lower of
{HEADROOM:.0%} of the flusher's ceiling ({_fmt(m["switch_rate_events_per_s"])} events/s) and the rate whose
pending rows over a hard window outgrow the buffer-pool budget
({_fmt(m["switch_rate_by_state_events_per_s"])} events/s). The Spark path keeps its state in its
own state store and scales the flush side out, so above these it is the path to take.

## Assumptions

- One Aurora writer vCPU does the work of one core of the benchmark machine; Aurora's storage
  layer (no doublewrite, no local redo flushing) makes this pessimistic for writes.
- Server CPU is the `mariadbd` process's utime + stime from `/proc` around each timed phase;
  on a shared machine it also counts other clients' work, so the connection thread's figure is
  given as well (it lacks background flushing and purge).
- Every event is a distinct item: coalescing (several events per row) lowers the flush cost per
  event by the coalescing factor.
- Pending rows at a sustained rate are at most rate x hard window ({HARD_WINDOW_S} s; the
  debounce is {DEBOUNCE_S} s); the budget is {BUFFER_POOL_SHARE:.0%} of a {BUFFER_POOL_GIB} GiB buffer pool.
- Lambda has one vCPU at {LAMBDA_VCPU_MB} MB; the ingest poller's own CPU excludes waiting for the
  database, which the wall-clock throughput includes.
- Headroom {HEADROOM:.0%}: bursts, retries after failures, and replays cost the same as new work.
{cost.render(costs, m["flusher_ceiling_rows_per_s"])}
## Runs

{runs}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ingest", nargs="+", type=Path, required=True, help="bench-ingest JSON lines")
    parser.add_argument("--flush", nargs="+", type=Path, required=True, help="bench-flush JSON lines")
    parser.add_argument("--worker", nargs="*", type=Path, default=[],
                        help="bench-worker JSON lines (one worker's records/s, for the worker's cost)")
    parser.add_argument("--stream", nargs="*", type=Path, default=[],
                        help="bench-stream JSON lines (the Spark path's events/s per core, for the cost model)")
    parser.add_argument("--server-cpu", choices=("process", "thread"), default="process",
                        help="server figure for the derived rates: the process (a machine of its own) or the"
                             " benchmark connection's thread (a shared database server)")
    args = parser.parse_args()
    sources = [p.as_posix() for p in [*args.ingest, *args.flush, *args.worker, *args.stream]]
    print(render(_load(args.ingest), _load(args.flush), sources, args.server_cpu, _load(args.stream),
                 _load(args.worker)), end="")


if __name__ == "__main__":
    main()
