"""Cost model: dollars per million events on the Lambda path, on the worker (containers on
Fargate) and on the Spark path (EMR Serverless), from the measured figures of
``capacity.model``, the worker benchmark and the stream benchmark, and the sustained traffic at
which one path becomes cheaper than another. Used by ``capacity.py``.

Prices are AWS's published on-demand list prices for us-east-1 (Aurora and ElastiCache: the
price pages' figures; Lambda: arm64, the first pricing tier), as read on PRICES_DATE; other
regions differ by up to about a third. Fargate's page renders its rates in the browser, so they
were read on FARGATE_PRICES_DATE from copies of it (Linux/x86 $0.000011244 per vCPU-second in
an ECS pricing transcript, and the per-hour figures below in two 2026 price guides that quote
the page). Change them here and run ``make capacity``.
"""

from __future__ import annotations

PRICES_DATE = "2026-11-25"
PRICES = {
    "lambda_gb_s": 0.0000133334,  # Lambda arm64, per GB-second
    "lambda_request": 0.20 / 1e6,  # Lambda, per request
    # Aurora MySQL Serverless v2 on Aurora I/O-Optimized (no per-request I/O charge), per ACU-hour;
    # on Aurora Standard it is 0.12 plus 0.20 per million I/O requests, which no benchmark measures.
    "aurora_acu_h": 0.156,
    "cache_node_h": 0.016,  # ElastiCache cache.t4g.micro, per node-hour (the dev environment's node)
    "sqs_request": 0.40 / 1e6,  # SQS standard, per request (64 KB chunk)
    "eventbridge_event": 1.00 / 1e6,  # EventBridge custom event, per 64 KB chunk
    "emr_vcpu_h": 0.052624,  # EMR Serverless x86, per vCPU-hour
    "emr_gb_h": 0.0057785,  # EMR Serverless, per GB-hour of memory
    "fargate_vcpu_h": 0.04048,  # Fargate Linux/x86, per vCPU-hour (Linux/ARM: 0.03238)
    "fargate_gb_h": 0.004445,  # Fargate Linux/x86, per GB-hour (Linux/ARM: 0.00356)
}
FARGATE_PRICES_DATE = "2026-11-28"
HOURS_PER_MONTH = 730
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600
LAMBDA_GB = 1769 / 1024  # the memory size that gives a Lambda function one full vCPU
ACU_PER_VCPU = 4  # an ACU is about 2 GiB with matching CPU; Aurora's r6g classes have 8 GiB per vCPU
AURORA_MIN_ACU = 0.5  # the dev environment's floor (infra/environments/dev.json)
INGEST_BATCH = 1000  # records per ingest invocation (the MSK batch size of staging and prod)
FLUSH_TICKS_PER_MONTH = 60 * 24 * 30  # one EventBridge tick a minute
MAX_BATCH_SIZE = 500  # rows per published batch (the default)
# EMR Serverless workers (its defaults are 4 vCPU / 16 GB): a streaming driver of 1 vCPU and 4 GB,
# executors of 4 vCPU and 16 GB, at least one, each loaded to HEADROOM of the measured rate.
DRIVER = (1, 4)
EXECUTOR = (4, 16)
HEADROOM = 0.5
# One worker task (ECS or EKS on Fargate): 1 vCPU and 2 GB (the worker's resident memory stays
# under 300 MB with a backlog of a million records), loaded to HEADROOM of the measured rate.
WORKER_TASK = (1, 2)


def _worker_month(vcpu: int, gb: int) -> float:
    return (vcpu * PRICES["emr_vcpu_h"] + gb * PRICES["emr_gb_h"]) * HOURS_PER_MONTH


def _task_month(vcpu: int, gb: int) -> float:
    return (vcpu * PRICES["fargate_vcpu_h"] + gb * PRICES["fargate_gb_h"]) * HOURS_PER_MONTH


def model(m: dict, stream_events_per_s_per_core: float | None,
          worker_records_per_s: float | None = None) -> dict[str, float | None]:
    """``m``: capacity.model's figures (the wall-clock throughputs and server CPU per event).
    Every event is a distinct item (no coalescing): the flush's share falls with coalescing.
    ``worker_records_per_s``: one worker's ingest rate (bench-worker); its tasks also run the
    flush, at the flusher's measured rate."""
    c: dict[str, float | None] = {}
    ingest_s = 1e6 / m["service_records_per_s"] if m.get("service_records_per_s") else None
    flush_rows_per_s = min(filter(None, (m.get("flush_file_rows_per_s"), m.get("flush_kafka_rows_per_s"))), default=None)
    flush_s = 1e6 / flush_rows_per_s if flush_rows_per_s else None
    c["lambda_ingest"] = (ingest_s * LAMBDA_GB * PRICES["lambda_gb_s"] + 1e6 / INGEST_BATCH * PRICES["lambda_request"]
                          if ingest_s else None)
    c["lambda_flush"] = flush_s * LAMBDA_GB * PRICES["lambda_gb_s"] if flush_s else None
    server_us = (m["ingest_us"] or 0) + (m["flush_us"] or 0)
    c["aurora_compute"] = server_us * ACU_PER_VCPU / 3600 * PRICES["aurora_acu_h"] if server_us else None
    c["sink_sqs"] = 1e6 / MAX_BATCH_SIZE * PRICES["sqs_request"]
    c["sink_eventbridge"] = 1e6 / MAX_BATCH_SIZE * PRICES["eventbridge_event"]
    parts = ("lambda_ingest", "lambda_flush", "aurora_compute")
    c["lambda_path"] = sum(c[k] for k in parts) if all(c[k] is not None for k in parts) else None
    c["lambda_fixed_month"] = (AURORA_MIN_ACU * PRICES["aurora_acu_h"] * HOURS_PER_MONTH
                               + PRICES["cache_node_h"] * HOURS_PER_MONTH
                               + FLUSH_TICKS_PER_MONTH * PRICES["lambda_request"])
    c["worker_records_per_s"] = worker_records_per_s
    if worker_records_per_s and flush_rows_per_s and c["aurora_compute"] is not None:
        # Task-seconds per event: the ingest at the worker's rate, the flush at the flusher's.
        task_s = 1 / worker_records_per_s + 1 / flush_rows_per_s
        c["worker_events_per_s_per_task"] = HEADROOM / task_s
        c["worker_tasks"] = task_s * 1e6 / 3600 * _task_month(*WORKER_TASK) / HOURS_PER_MONTH / HEADROOM
        c["worker_path"] = c["worker_tasks"] + c["aurora_compute"]
        c["worker_fixed_month"] = (AURORA_MIN_ACU * PRICES["aurora_acu_h"] * HOURS_PER_MONTH
                                   + PRICES["cache_node_h"] * HOURS_PER_MONTH)
    else:
        c["worker_events_per_s_per_task"] = c["worker_tasks"] = c["worker_path"] = c["worker_fixed_month"] = None
    rate = stream_events_per_s_per_core
    c["stream_events_per_s_per_core"] = rate
    if rate:
        core_h = 1e6 / rate / 3600
        c["spark_path"] = core_h * (PRICES["emr_vcpu_h"] + EXECUTOR[1] / EXECUTOR[0] * PRICES["emr_gb_h"]) / HEADROOM
        c["spark_executor_events_per_s"] = rate * EXECUTOR[0] * HEADROOM
        c["spark_fixed_month"] = _worker_month(*DRIVER) + _worker_month(*EXECUTOR)
        c["crossover_events_per_s"] = crossover(c)
    else:
        c["spark_path"] = c["spark_executor_events_per_s"] = c["spark_fixed_month"] = None
        c["crossover_events_per_s"] = None
    worker = c["worker_path"] is not None
    c["crossover_worker_lambda"] = crossover(c, "worker", "lambda") if worker else None
    c["crossover_spark_worker"] = crossover(c, "spark", "worker") if worker and rate else None
    return c


def monthly(c: dict, events_per_s: float, path: str) -> float:
    """Monthly cost at a sustained rate: the Lambda path is paid per use above its floor; the
    Spark path by the workers it keeps running (a driver and enough executors)."""
    if path == "lambda":
        return c["lambda_fixed_month"] + events_per_s * SECONDS_PER_MONTH / 1e6 * c["lambda_path"]
    if path == "worker":
        tasks = max(1, -(-events_per_s // c["worker_events_per_s_per_task"]))
        return (c["worker_fixed_month"] + tasks * _task_month(*WORKER_TASK)
                + events_per_s * SECONDS_PER_MONTH / 1e6 * c["aurora_compute"])
    executors = max(1, -(-events_per_s // c["spark_executor_events_per_s"]))
    return _worker_month(*DRIVER) + executors * _worker_month(*EXECUTOR)


def crossover(c: dict, cheaper: str = "spark", than: str = "lambda") -> float | None:
    """The lowest sustained rate (events/s, in steps of 100) at which path ``cheaper`` costs less
    than path ``than``."""
    for rate in range(100, 1_000_001, 100):
        if monthly(c, rate, cheaper) < monthly(c, rate, than):
            return rate
    return None


def _usd(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None else f"${value:,.{digits}f}"


def render(c: dict, flusher_ceiling: float | None) -> str:
    rows = [("Lambda: ingest (GB-seconds at one vCPU, requests of 1,000 records)", c["lambda_ingest"]),
            ("Lambda: flush (GB-seconds)", c["lambda_flush"]),
            ("Aurora: compute (server CPU per event as ACU-seconds)", c["aurora_compute"]),
            ("**Lambda path, per million events**", c["lambda_path"]),
            ("sink requests, if SQS (one per batch of 500)", c["sink_sqs"]),
            ("sink events, if EventBridge (one per batch of 500)", c["sink_eventbridge"]),
            (f"Worker: Fargate tasks (ingest at the worker's rate, flush at the flusher's, at {HEADROOM:.0%} load)",
             c["worker_tasks"]),
            ("**Worker on Fargate, per million events** (tasks and Aurora compute)", c["worker_path"]),
            (f"**Spark path on EMR Serverless, per million events** (executors at {HEADROOM:.0%} load)",
             c["spark_path"])]
    table = "\n".join(f"| {name} | {_usd(value)} |" for name, value in rows)
    prices = "\n".join(f"| `{k}` | {v:.10g} |" for k, v in PRICES.items())
    cross = c["crossover_events_per_s"]
    ceiling = f"{flusher_ceiling:,.0f}" if flusher_ceiling else "n/a"
    levels = [1_000, 5_000, 10_000, 20_000, 50_000]
    by_rate = "\n".join(
        f"| {r:,} | {_usd(monthly(c, r, 'lambda'), 0)} | "
        f"{_usd(monthly(c, r, 'worker'), 0) if c['worker_path'] is not None else 'n/a'} | "
        f"{_usd(monthly(c, r, 'spark'), 0) if c['spark_executor_events_per_s'] else 'n/a'} |" for r in levels
    ) if c["lambda_path"] is not None else ""
    rate = c["stream_events_per_s_per_core"]
    worker_rate = c["worker_records_per_s"]

    def _above(value: float | None) -> str:
        return f"above {value:,.0f} events/s sustained" if value else "at no sustained rate up to 1,000,000 events/s"
    crossovers = (f"""- **The worker is cheaper than the Lambda path {_above(c["crossover_worker_lambda"])}**.
- **The Spark path is cheaper than the worker {_above(c["crossover_spark_worker"])}**.
- **The Spark path is cheaper than the Lambda path {_above(cross)}**.{c.get("worker_loaded_note", "")}""")
    return f"""
## Cost

Dollars per million events from the measured figures above, the worker benchmark's
{f"{worker_rate:,.0f}" if worker_rate else "n/a"} records/s per worker and the stream benchmark's
{f"{rate:,.0f}" if rate else "n/a"} events/s per core, at AWS's on-demand list prices for us-east-1 as read on
{PRICES_DATE} (Fargate's on {FARGATE_PRICES_DATE}; the table at the end; `bench/cost.py` holds them). Every event
a distinct item (no coalescing). Kafka, the network and storage are the same on every path and left out.

| part | per million events |
|---|---|
{table}

Fixed costs a month: the Lambda path {_usd(c["lambda_fixed_month"], 0)} (Aurora's {AURORA_MIN_ACU} ACU floor, one
cache node, a flush tick a minute); the worker {_usd(c["worker_fixed_month"], 0)} (the same database and cache) plus
{_usd(_task_month(*WORKER_TASK), 0)} per task of {WORKER_TASK[0]} vCPU and {WORKER_TASK[1]} GB running all month, at least one; the Spark path
{_usd(c["spark_fixed_month"], 0)} (a streaming driver of {DRIVER[0]} vCPU and {DRIVER[1]} GB and one executor of {EXECUTOR[0]} vCPU and
{EXECUTOR[1]} GB, running all month).

| sustained events/s | Lambda path a month | worker on Fargate a month | Spark path a month |
|---|---|---|---|
{by_rate}

{crossovers}

The Lambda path's and the worker's single flusher (one flush per tick across the fleet) tops
out at {ceiling} rows/s (above), so above that the Spark path is the one that keeps up, whatever
it costs. The worker and the Spark path are paid by the task and the executor: one worker task
carries {f"{c['worker_events_per_s_per_task']:,.0f}" if c["worker_events_per_s_per_task"] else "n/a"} events/s ingested and flushed at {HEADROOM:.0%} load, one executor
{f"{c['spark_executor_events_per_s']:,.0f}" if c["spark_executor_events_per_s"] else "n/a"} events/s, so their costs move in steps.

Assumptions of the cost model: an Aurora ACU does the work of a quarter vCPU ({ACU_PER_VCPU} ACUs per
vCPU, as Aurora's r6g classes have 8 GiB per vCPU and an ACU about 2 GiB); the cluster uses
Aurora I/O-Optimized, so there is no per-request I/O charge to estimate; Lambda runs at {LAMBDA_GB * 1024:,.0f} MB (one vCPU) and is billed for the wall clock the benchmarks measured,
which includes waiting for the database; a worker task of {WORKER_TASK[0]} vCPU stores what one worker stored in
the benchmark (where it shared the machine's cores with the database server) and also runs the flush, at the
flusher's measured rate; Fargate is billed for what a task reserves, busy or not.

| price | USD |
|---|---|
{prices}
"""
