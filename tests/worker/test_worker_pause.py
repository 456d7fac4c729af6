"""Pause, never spiral: the database hangs or refuses connections for longer than
``max.poll.interval.ms``; the worker keeps polling, pauses the partitions whose write is stuck or
failing, causes no rebalance, loses no record, and resumes by itself when the database is back."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from worker_support import (
    assert_committed_durable,
    assigned,
    durable_positions,
    running,
    wait_for,
)

from consolidator.worker import ledger

MAX_POLL_INTERVAL_MS = 3000
SLOW_WRITE_S = 1.5  # a write in flight this long pauses its partitions (the worker's is longer)
BACKOFF_MAX_S = 1.0  # the longest wait between two writes that fail (the worker's is longer)
OUTAGE_S = 4.5  # longer than max.poll.interval.ms and than a slow write


@pytest.mark.parametrize("outage", ["blackhole", "refuse"], ids=["database-hangs", "database-down"])
def test_a_database_outage_longer_than_max_poll_interval_pauses_without_a_rebalance(
        outage, kafka, topic, worker_env, store, db_proxy, tmp_path: Path, monkeypatch):
    # the ledger's bounds shortened, so that the outage outlasts them in a few seconds
    monkeypatch.setattr(ledger, "SLOW_WRITE_S", SLOW_WRITE_S)
    monkeypatch.setattr(ledger, "BACKOFF_MAX_S", BACKOFF_MAX_S)
    env = {**worker_env,
           "CONSOLIDATOR_DATABASE_URL": worker_env["CONSOLIDATOR_DATABASE_URL"].replace(
               "127.0.0.1:3306", f"127.0.0.1:{db_proxy.port}"),
           "CONSOLIDATOR_KAFKA_CONFIG": json.dumps({"max.poll.interval.ms": MAX_POLL_INTERVAL_MS})}
    dead = tmp_path / "dead.jsonl"
    group = env["CONSOLIDATOR_KAFKA_GROUP_ID"]
    kafka.produce(topic, 0, 100)
    with running(env, role="ingest") as worker:
        wait_for(assigned(worker, 4), 10, "the assignment")
        wait_for(lambda: len(durable_positions(store, dead)) == 100, 20, "the first 100 rows")
        db_proxy.set(outage)
        kafka.produce(topic, 100, 200)
        started = time.monotonic()
        while time.monotonic() - started < OUTAGE_S:
            assert time.monotonic() - worker.poll.beat < 1.0, "the poll loop kept polling"
            time.sleep(0.2)
        paused = worker.poll.ledger.paused()
        assert paused, "the partitions whose write is stuck or failing are paused"
        assert worker.metrics.value("PartitionPaused", (("topic", topic), ("partition", str(paused[0][1])))) == 1
        assert len(durable_positions(store, dead)) == 100, "nothing was written during the outage"
        db_proxy.set("forward")
        wait_for(lambda: len(durable_positions(store, dead)) == 300, 30, "the rest, once the database is back")
        wait_for(lambda: not worker.poll.ledger.paused(), 10, "every partition resumed")
        ends = {p: end for p, end in kafka.high_watermarks(topic).items() if end}
        wait_for(lambda: kafka.committed(group, topic) == ends, 10, "the commits to reach the end")
        assert [kind for kind, _ in worker.poll.rebalances] == ["assigned"], \
            f"no revoke, no loss: {worker.poll.rebalances}"
    assert_committed_durable(kafka, group, topic, store, dead)
