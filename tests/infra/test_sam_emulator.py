"""Every function end to end behind AWS's Lambda Runtime Interface Emulator (the one the SAM CLI
ships), as ``sam local invoke`` would run it but without a container: the handler and code of
the dev template's bundled asset (its ``Handler``, its ``consolidator`` package), the template's
environment with local overrides (``--env-vars``), the runtime API client ``awslambdaric``, and
the events of events/ posted to the emulator's HTTP endpoint. The bundle's wheels are built for
arm64, so the dependencies come from the project's environment (and nothing else of it: the
runtime starts with ``python -S``). One emulator per function for the module, on one database
of the module's own, the local Redis and file sinks (no AWS API is called)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest
from support import MYSQL_HOST, MYSQL_PASSWORD, MYSQL_PORT, MYSQL_USER, sql

from consolidator.rules.batch import ack_token
from consolidator.store.completion import SealedBatch
from consolidator.store.mysql import ConnectionParams, MySQLStore

pytestmark = [pytest.mark.infra, pytest.mark.sam]

EVENTS = Path(__file__).resolve().parents[2] / "events"
REDIS_URL = "redis://127.0.0.1:6379/12"  # no other test's flush lock (13, 14, 15 are taken)
FLUSH_TIMEOUT_SECONDS = 3  # the template's 55 s, shortened: the flush ticks until the deadline
SAMPLE_BATCH = "4f1c0d2b9a8e7f6a5b4c3d2e1f0a9b8c"  # the batch of events/sqs-acks.json
SAMPLE_KEY = bytes(range(32))  # events/sqs-acks.json's tokens are made with this ack key


def _event(name: str) -> dict:
    return json.loads((EVENTS / name).read_text())


def _admin(sql_text: str) -> None:
    with pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user=MYSQL_USER, password=MYSQL_PASSWORD,
                         autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(sql_text)


@pytest.fixture(scope="module")
def module_database() -> Iterator[str]:
    name = f"consolidator_test_{uuid.uuid4().hex[:10]}"
    _admin(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    yield f"mysql://{MYSQL_USER}:{MYSQL_PASSWORD}@{MYSQL_HOST}:{MYSQL_PORT}/{name}"
    _admin(f"DROP DATABASE IF EXISTS {name}")


@pytest.fixture(scope="module")
def emulated(synthesized, module_database, tmp_path_factory):
    """name -> EmulatedFunction, for migrate, ingest, flush, cleanup and acks of the dev stage."""
    import redis
    import sam_local

    env = synthesized["dev"]
    work = tmp_path_factory.mktemp("sam-emulator")
    local = {  # what a local-env.json would say
        "CONSOLIDATOR_DATABASE_URL": module_database,
        "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{work}/dead-letter.jsonl",
        "CONSOLIDATOR_REDIS_URL": REDIS_URL,
        "CONSOLIDATOR_SINK_URL": f"file://{work}/batches.jsonl",
        "CONSOLIDATOR_COMPLETION_SINK_URL": f"file://{work}/completions.jsonl",
        "AWS_REGION": env.config.region, "POWERTOOLS_TRACE_DISABLED": "1",
    }
    overrides = {"flush": {  # due at once, the samples' old timestamps not expired, short ticks
        "CONSOLIDATOR_DEBOUNCE_SECONDS": "0.001", "CONSOLIDATOR_HARD_WINDOW_SECONDS": "0.001",
        "CONSOLIDATOR_EVENT_TTL_SECONDS": "0", "CONSOLIDATOR_TICK_INTERVAL_SECONDS": "0.25",
        "CONSOLIDATOR_FUNCTION_TIMEOUT_SECONDS": str(FLUSH_TIMEOUT_SECONDS),
        "CONSOLIDATOR_LOCK_TTL_SECONDS": str(FLUSH_TIMEOUT_SECONDS)}}
    functions = {}
    try:
        for name in ("migrate", "ingest", "flush", "cleanup", "acks"):
            functions[name] = sam_local.start_function(
                env.template_path, name, work, {**local, **overrides.get(name, {})},
                timeout_seconds=FLUSH_TIMEOUT_SECONDS if name == "flush" else None)
            assert functions[name].name == env.logical_id(getattr(env.stack, name))
            assert sorted(p.name for p in (work / name).iterdir()) == ["consolidator", "handler.py"]
        migrated = functions["migrate"].invoke({})
        assert "errorType" not in migrated and migrated["applied"], migrated
        yield functions, work
    finally:
        for function in functions.values():
            function.stop()
        redis.Redis.from_url(REDIS_URL).delete("consolidator:flush-lock")


@pytest.fixture(scope="module")
def module_store(module_database) -> Iterator[MySQLStore]:
    s = MySQLStore(ConnectionParams.from_url(module_database))
    yield s
    s.close()


def _log_records(function) -> list[dict]:
    """The function's structured (Powertools) log lines among what the emulator printed."""
    records = []
    for line in function.output().splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a line of EMF metrics or another tool cut by the log's end
    return records


def test_ingest_then_flush_publish_the_msk_samples_as_batches(emulated, module_store):
    functions, work = emulated
    assert functions["ingest"].invoke(_event("msk-orders.json")) == {"batchItemFailures": []}
    assert functions["ingest"].invoke(_event("msk-poison-mix.json")) == {"batchItemFailures": []}
    dead = [json.loads(line) for line in (work / "dead-letter.jsonl").read_text().splitlines()]
    assert len(dead) == 7 and all(entry.get("reason") for entry in dead), dead  # 7 of 9 mixed records are poison
    pending = sql(module_store, "SELECT group_key, COUNT(*) AS n FROM buffer_rows GROUP BY group_key"
                                " ORDER BY group_key")
    assert [(r["group_key"], r["n"]) for r in pending] == [("WH-42", 8), ("WH-43", 6)]

    started = time.monotonic()
    report = functions["flush"].invoke(_event("scheduled-flush.json"))
    elapsed = time.monotonic() - started
    assert "errorType" not in report, report
    assert report["published"] == 2 and report["dead"] == 0 and report["publish_failures"] == 0, report
    # it ticked while the invocation's remaining time (the emulator's deadline) allowed, and stopped in time
    assert report["ticks"] >= 2 and 0.5 < elapsed < FLUSH_TIMEOUT_SECONDS, (report, elapsed)
    batches = [json.loads(line) for line in (work / "batches.jsonl").read_text().splitlines()]
    assert sorted(b["group_key"] for b in batches) == ["WH-42", "WH-43"]
    names = {r.get("function_name") for r in _log_records(functions["flush"])}
    assert functions["flush"].name in names, names  # the context the emulator gave the handler


def test_acks_apply_the_sample_acks_and_the_sweep_runs_on_its_schedule(emulated, module_store):
    functions, work = emulated
    module_store.seal([SealedBatch(SAMPLE_BATCH, "WH-7", ("A001", "A002", "A003"))], int(time.time() * 1000))
    sql(module_store, "UPDATE completion_keys SET ack_key = %s", (SAMPLE_KEY,))  # the key the sample was made with
    event = _event("sqs-acks.json")
    assert all(json.loads(r["body"])["ack_token"] == ack_token(SAMPLE_KEY, SAMPLE_BATCH) for r in event["Records"])
    assert functions["acks"].invoke(event) == {"batchItemFailures": []}  # member 42 refused, not retried
    assert module_store.tracker(SAMPLE_BATCH).complete
    completions = [json.loads(line) for line in (work / "completions.jsonl").read_text().splitlines()]
    assert [c["batch_id"] for c in completions] == [SAMPLE_BATCH]
    sweep = functions["acks"].invoke(_event("scheduled-acks-sweep.json"))
    assert sweep == {"republished": 0, "publish_failures": 0, "incomplete": 0, "oldest_incomplete_age_ms": None}


def test_cleanup_runs_on_its_schedule_and_logs_with_the_emulators_context(emulated):
    functions, _ = emulated
    report = functions["cleanup"].invoke(_event("scheduled-cleanup.json"))
    assert "errorType" not in report, report
    this_month = int(time.strftime("%Y%m", time.gmtime()))
    assert report["month"] == this_month and report["ensured_through"] > this_month and report["refused"] == []
    finished = [r for r in _log_records(functions["cleanup"]) if r.get("message") == "cleanup finished"]
    assert finished and finished[-1]["function_name"] == functions["cleanup"].name
    assert finished[-1]["function_memory_size"] in (256, "256")  # the template's MemorySize
