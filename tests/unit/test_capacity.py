"""bench/capacity.py derives the capacity model from benchmark JSON, not from typed numbers."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_capacity():
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))  # its sibling cost.py, as when run as a script
    spec = importlib.util.spec_from_file_location("capacity_under_test", ROOT / "bench" / "capacity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


INGEST = {"server_cpu_us_per_record": 20.0, "load_data_server_cpu_us_per_record": 15.0,
          "server_thread_cpu_us_per_record": 18.0, "client_cpu_us_per_record": 12.5,
          "service_records_per_s": 30_000, "ratio_vs_load_data": 0.5, "buffer_bytes_per_row": 400,
          "replay_state_rows": 6, "decode_us_per_record": 1.0, "decode_exact_us_per_record": 2.0}
FLUSH = {"server_cpu_us_per_row": 30.0, "sql_floor_server_cpu_us_per_row": 25.0, "server_thread_cpu_us_per_row": 28.0,
         "client_cpu_us_per_row": 10.0, "file_rows_per_s": 20_000, "file_batches_per_s": 40.0,
         "kafka_rows_per_s": 16_000, "kafka_batches_per_s": 32.0, "ratio_vs_sql_floor": 0.8, "max_batch_size": 500}


def test_model_follows_the_measured_figures():
    capacity = load_capacity()
    m = capacity.model([INGEST, {**INGEST, "server_cpu_us_per_record": 30.0}, {**INGEST, "server_cpu_us_per_record": 40.0}],
                       [FLUSH])
    assert m["server_cpu_us_per_record"] == 30.0  # the median of the runs
    assert m["ingest_events_per_vcpu_s"] == 1e6 / 30
    assert m["both_events_per_vcpu_s"] == 1e6 / 60
    assert m["poller_cpu_records_per_s"] == 80_000
    assert m["flusher_ceiling_rows_per_s"] == 16_000  # the slower sink bounds the single flusher
    assert m["switch_rate_events_per_s"] == 16_000 * capacity.HEADROOM
    budget = capacity.BUFFER_POOL_GIB * 2**30 * capacity.BUFFER_POOL_SHARE / 400
    assert m["switch_rate_by_state_events_per_s"] == budget / capacity.HARD_WINDOW_S
    shared = capacity.model([INGEST], [FLUSH], "thread")  # a shared server: the connection's thread
    assert shared["both_events_per_vcpu_s"] == 1e6 / (18 + 28)
    assert shared["flusher_ceiling_rows_per_s"] == 1e6 / (10 + 28)  # the flusher's CPU + the server's


def test_rendered_page_lists_its_sources_and_missing_figures_as_na(tmp_path):
    capacity = load_capacity()
    (tmp_path / "i.json").write_text("noise line\n" + json.dumps({**INGEST, "server_cpu_us_per_record": None}))
    runs = capacity._load([tmp_path / "i.json"])
    page = capacity.render(runs, [FLUSH], ["bench/results/ingest-1.json"])
    assert "`bench/results/ingest-1.json`" in page
    assert "| events/s one Aurora writer vCPU can ingest | n/a |" in page
    assert "| **the single flusher's ceiling used below** (measured, the slower sink) | **16,000 rows/s** |" in page


def test_cost_model_follows_the_measured_figures_and_finds_where_spark_is_cheaper():
    capacity = load_capacity()
    import cost

    m = capacity.model([INGEST], [FLUSH])
    c = cost.model(m, stream_events_per_s_per_core=20_000)
    # Lambda: the wall clock of one ingest invocation per record and of the slower sink's flush
    assert c["lambda_flush"] == 1e6 / 16_000 * cost.LAMBDA_GB * cost.PRICES["lambda_gb_s"]
    # Aurora: the server CPU per event (20 + 30 us) as ACU-seconds
    assert c["aurora_compute"] == 50 * cost.ACU_PER_VCPU / 3600 * cost.PRICES["aurora_acu_h"]
    doubled = cost.model(capacity.model([{**INGEST, "server_cpu_us_per_record": 70.0}], [FLUSH]), 20_000)
    assert doubled["aurora_compute"] == 2 * c["aurora_compute"]
    # the crossover is where the monthly costs change order, to the step of 100 events/s
    cross = c["crossover_events_per_s"]
    assert cross is not None
    assert cost.monthly(c, cross, "spark") < cost.monthly(c, cross, "lambda")
    assert cost.monthly(c, cross - 100, "spark") >= cost.monthly(c, cross - 100, "lambda")
    # a faster stream carries more per executor, so its cost per event falls with the rate
    assert cost.model(m, 40_000)["spark_path"] == c["spark_path"] / 2
    page = capacity.render([INGEST], [FLUSH], ["x"], stream=[{"events_per_s_per_core": 20_000}])
    assert f"**The Spark path is cheaper than the Lambda path above {cross:,.0f} events/s sustained**" in page
    assert cost.PRICES_DATE in page
    no_stream = capacity.render([INGEST], [FLUSH], ["x"])
    assert "**The Spark path is cheaper than the Lambda path at no sustained rate" in no_stream


WORKER = {"worker_records_per_s": 10_000, "ratio_vs_direct": 0.9, "rss_peak_mb": 130.0, "load_average": [0.8, 1, 1]}


def test_the_worker_costs_its_tasks_at_fargate_prices_plus_the_database():
    """A task's seconds per event are the ingest at the worker's rate and the flush at the flusher's;
    the tasks run at the headroom's load and the database costs what it costs the Lambda path."""
    capacity = load_capacity()
    import cost

    m = capacity.model([INGEST], [FLUSH])
    c = cost.model(m, 20_000, worker_records_per_s=10_000)
    task_s = 1 / 10_000 + 1 / 16_000  # the slower sink's flush, as for the Lambda flusher
    task_h = cost.PRICES["fargate_vcpu_h"] * cost.WORKER_TASK[0] + cost.PRICES["fargate_gb_h"] * cost.WORKER_TASK[1]
    assert abs(c["worker_tasks"] - task_s * 1e6 / 3600 * task_h / cost.HEADROOM) < 1e-12
    assert c["worker_path"] == c["worker_tasks"] + c["aurora_compute"]
    assert c["worker_events_per_s_per_task"] == cost.HEADROOM / task_s
    # a task more for every task's load; at least one task all month
    one = cost.monthly(c, 100, "worker")
    assert abs(one - (c["worker_fixed_month"] + task_h * cost.HOURS_PER_MONTH
                      + 100 * cost.SECONDS_PER_MONTH / 1e6 * c["aurora_compute"])) < 1e-6
    for cheaper, than, key in (("worker", "lambda", "crossover_worker_lambda"), ("spark", "worker", "crossover_spark_worker")):
        cross = c[key]
        if cross is not None:
            assert cost.monthly(c, cross, cheaper) < cost.monthly(c, cross, than)
            assert cross == 100 or cost.monthly(c, cross - 100, cheaper) >= cost.monthly(c, cross - 100, than)
    page = capacity.render([INGEST], [FLUSH], ["x"], stream=[{"events_per_s_per_core": 20_000}], worker=[WORKER])
    assert "| worker on Fargate a month |" in page and cost.FARGATE_PRICES_DATE in page
    assert "| 10,000 records/s |" in page and "under load" not in page
    loaded = capacity.render([INGEST], [FLUSH], ["x"], worker=[{**WORKER, "load_average": [12.1, 13, 8]}])
    assert "10,000 records/s (under load: load average 12 on 2 cores; replace with quiet runs)" in loaded
    no_worker = capacity.render([INGEST], [FLUSH], ["x"])
    assert "| 1,000 | $" in no_worker and "n/a |" in no_worker
