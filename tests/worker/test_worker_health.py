"""Health and metrics: ``/healthz``, ``/readyz`` (partitions assigned, the database reachable) and
``/metrics`` in Prometheus' text format with the catalogue's names; every metric the code records
is in the catalogue; JSON log lines that never hold a secret."""

from __future__ import annotations

import ast
import json
import re
import signal
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from local_mariadb import free_port
from worker_support import durable_positions, log_lines, running, wait_for, worker_process

from consolidator.services.metrics import METRICS, prometheus_name

SRC = Path(__file__).resolve().parents[2] / "src" / "consolidator"
SAMPLE = re.compile(r'^([a-z_:][a-z0-9_:]*)(\{([a-z_]+="(?:[^"\\\n]|\\.)*")(,[a-z_]+="(?:[^"\\\n]|\\.)*")*\})? '
                    r"(-?[0-9.e+-]+|[+-]Inf|NaN)$")


def get(port: int, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()
    except urllib.error.URLError:
        return 0, "", ""  # not serving (yet)


def parse_metrics(text: str) -> dict[str, float]:
    """Every sample (``name{labels}`` -> value) of a Prometheus text exposition, checked line by
    line: HELP and TYPE once per family, before its samples; samples of the declared family."""
    samples: dict[str, float] = {}
    families: dict[str, str] = {}
    current = None
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            current = line.split()[2]
            assert current not in families, f"family {current} declared twice"
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert name == current and kind in ("counter", "gauge", "summary", "histogram")
            families[name] = kind
        else:
            match = SAMPLE.match(line)
            assert match, f"not a sample line: {line!r}"
            name = match.group(1)
            family = name
            if families.get(current) in ("summary", "histogram"):
                family = name.removesuffix("_sum").removesuffix("_count").removesuffix("_bucket")
            assert family == current, f"{name} outside its family"
            key = name + (match.group(2) or "")
            assert key not in samples, f"{key} twice"
            samples[key] = float(match.group(5))
    return samples


def test_health_readiness_and_metrics_of_a_running_worker(kafka, topic, worker_env, store, db_proxy,
                                                          tmp_path: Path):
    port = free_port()
    env = {**worker_env, "CONSOLIDATOR_WORKER_HTTP_PORT": str(port),
           "CONSOLIDATOR_DATABASE_URL": worker_env["CONSOLIDATOR_DATABASE_URL"].replace(
               "127.0.0.1:3306", f"127.0.0.1:{db_proxy.port}")}
    kafka.produce(topic, 0, 50)
    with running(env) as worker:
        wait_for(lambda: get(port, "/healthz")[0] == 200, 10, "the HTTP server")
        status, kind, body = get(port, "/healthz")
        assert (status, kind, json.loads(body)) == (200, "application/json", {"ok": True, "problems": []})
        wait_for(lambda: get(port, "/readyz")[0] == 200, 20, "ready: partitions assigned, database reachable")
        wait_for(lambda: len(durable_positions(store, tmp_path / "dead.jsonl")) == 50, 20, "50 rows")
        wait_for(lambda: (tmp_path / "out.jsonl").exists(), 20, "a batch published")
        time.sleep(1.2)  # one more round of the gauges
        status, kind, text = get(port, "/metrics")
        assert (status, kind) == (200, "text/plain; version=0.0.4; charset=utf-8")
        samples = parse_metrics(text)
        known = {prometheus_name(m) for m in METRICS}
        assert {re.sub(r"_sum$|_count$|_bucket$", "", re.sub(r"\{.*", "", k)) for k in samples} <= known
        latency = "consolidator_event_to_publish_latency_seconds"  # a histogram: buckets, count, sum
        assert f"# TYPE {latency} histogram" in text
        assert samples[f'{latency}_bucket{{le="+Inf"}}'] == samples[f"{latency}_count"] >= 1
        assert samples[f"{latency}_sum"] > 0
        assert samples["consolidator_records_ingested_total"] == 50
        assert samples["consolidator_batches_flushed_total"] >= 1
        lags = {k: v for k, v in samples.items() if k.startswith("consolidator_partition_lag{")}
        assert lags and set(lags.values()) == {0}, lags
        assert samples[f'consolidator_partition_paused{{topic="{topic}",partition="0"}}'] == 0
        assert samples["consolidator_assigned_partitions"] == 4
        assert samples["consolidator_flush_tick_duration_seconds_count"] >= 1
        assert samples["consolidator_flush_lock_held"] in (0, 1)
        assert samples["consolidator_pending_groups"] >= 0 and "consolidator_oldest_pending_age_seconds" in samples
        assert samples["consolidator_offsets_committed_total"] >= 1
        assert get(port, "/nothing")[0] == 404
        db_proxy.set("refuse")
        wait_for(lambda: get(port, "/readyz")[0] == 503, 15, "not ready while the database is down")
        assert any(p.startswith("database unreachable") for p in json.loads(get(port, "/readyz")[2])["problems"])
        assert get(port, "/healthz")[0] == 200, "alive all the same: a restart would not help"
        db_proxy.set("forward")
        wait_for(lambda: get(port, "/readyz")[0] == 200, 15, "ready again")
        assert worker.http is not None


def test_readiness_needs_assigned_partitions(kafka, worker_env):
    port = free_port()
    env = {**worker_env, "CONSOLIDATOR_WORKER_HTTP_PORT": str(port),
           "CONSOLIDATOR_SOURCE_TOPICS": f"not-created-{uuid.uuid4().hex[:6]}"}
    with running(env, role="ingest"):
        wait_for(lambda: get(port, "/healthz")[0] == 200, 10, "alive")
        time.sleep(1)
        status, _, body = get(port, "/readyz")
        assert status == 503 and "no partition assigned" in json.loads(body)["problems"]


def _recorded_names() -> set[str]:
    """Every metric name the code records: ``add_metric(name="X")``, the names a loop feeds to
    ``add_metric(name=name)``, the flush reasons' names, and the worker's gauges (``.set("X")``)."""
    found = set()
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == "add_metric":
                    for keyword in node.keywords:
                        if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                            found.add(keyword.value.value)
                elif node.func.attr == "set" and node.args and isinstance(node.args[0], ast.Constant) \
                        and path.parent.name == "worker":
                    found.add(node.args[0].value)
            elif isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple) and "add_metric" in ast.unparse(node):
                found |= {e.elts[0].value for e in node.iter.elts if isinstance(e, ast.Tuple)}
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "REASON_METRICS" for t in node.targets):
                found |= {v.value for v in node.value.values}
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "_rebalanced":
                found.add(node.args[2].value)
    return found


def test_every_metric_the_code_records_is_in_the_catalogue_and_nothing_else():
    recorded = _recorded_names()
    catalogue = {m.name for m in METRICS}
    assert recorded - catalogue == set(), "recorded but not in services/metrics.py METRICS"
    assert catalogue - recorded == set(), "in the catalogue but recorded nowhere"
    names = [prometheus_name(m) for m in METRICS]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"consolidator_[a-z0-9_]+", n) for n in names)
    assert prometheus_name(next(m for m in METRICS if m.name == "OldestPendingAge")) == \
        "consolidator_oldest_pending_age_seconds"
    assert prometheus_name(next(m for m in METRICS if m.name == "RecordsIngested")) == \
        "consolidator_records_ingested_total"


def test_json_log_lines_never_hold_a_secret_even_at_debug(kafka, topic, worker_env):
    secret = f"pw-{uuid.uuid4().hex}"
    env = {**worker_env, "POWERTOOLS_LOG_LEVEL": "DEBUG", "CONSOLIDATOR_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
           "CONSOLIDATOR_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "CONSOLIDATOR_KAFKA_SASL_USERNAME": "user",
           "CONSOLIDATOR_KAFKA_SASL_PASSWORD": secret,
           "CONSOLIDATOR_KAFKA_CONFIG": json.dumps({"sasl.oauthbearer.client.secret": secret})}
    with worker_process(env, "--role", "ingest") as process:
        time.sleep(4)  # the mock cluster refuses SASL: the client logs its failures meanwhile
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    lines = log_lines(stdout)  # every line is JSON
    assert any(line["name"] == "consolidator.kafka.client" for line in lines), "the client's own lines too"
    assert secret not in stdout and secret not in stderr
