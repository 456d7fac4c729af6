"""Shut down cleanly: ``consolidator worker`` as a process. SIGTERM stops fetching, settles the
write in flight (or abandons it at its bound), commits what is durable, releases the lock,
leaves the group and exits 0 within the bound; a second signal exits at once, losing nothing."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import redis
from confluent_kafka import Consumer
from support import REDIS_URL
from worker_support import (
    assert_committed_durable,
    durable_positions,
    log_lines,
    running,
    wait_for,
    worker_process,
)


def _terminated(process) -> tuple[str, str, float]:
    """SIGTERM to ``process``: its stdout and stderr, and how long it took to exit."""
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=30)
    return stdout, stderr, time.monotonic() - sent


def _ends(kafka, topic) -> dict[int, int]:
    return {p: end for p, end in kafka.high_watermarks(topic).items() if end}


def test_sigterm_commits_releases_the_lock_leaves_the_group_and_exits_0(kafka, topic, worker_env, store,
                                                                        tmp_path: Path):
    env = {**worker_env, "CONSOLIDATOR_WORKER_COMMIT_INTERVAL_SECONDS": "300"}  # only the shutdown commits
    group = env["CONSOLIDATOR_KAFKA_GROUP_ID"]
    kafka.produce(topic, 0, 300)
    with worker_process(env) as process:
        wait_for(lambda: len(durable_positions(store, tmp_path / "dead.jsonl")) == 300, 30, "300 rows")
        assert kafka.committed(group, topic) == {}
        stdout, stderr, took = _terminated(process)
    assert process.returncode == 0, stderr
    assert took < 25, f"exit took {took:.1f} s"
    lines = log_lines(stdout)
    assert {line["service"] for line in lines} == {"consolidator-worker"}
    messages = [line["message"] for line in lines]
    shutdown_commits = [line for line in lines if line["message"] == "offsets committed"]
    assert [c["reason"] for c in shutdown_commits] == ["shutdown"]
    assert {(o["partition"], o["offset"]) for o in shutdown_commits[0]["offsets"]} == set(_ends(kafka, topic).items())
    assert messages.index("offsets committed") < messages.index("consumer closed; left the group") \
        < messages.index("worker stopped")
    assert kafka.committed(group, topic) == _ends(kafka, topic)
    assert redis.Redis.from_url(REDIS_URL).get(env["CONSOLIDATOR_LOCK_KEY"]) is None, "the flush lock is free"
    # it left the group: a new member gets every partition at once (a member that just vanished
    # would keep its partitions until its session timed out, 45 s)
    newcomer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group, "group.protocol": "consumer",
                         "log_level": 2})
    got: list = []
    newcomer.subscribe([topic], on_assign=lambda _c, partitions: got.extend(partitions))
    try:
        wait_for(lambda: newcomer.poll(0.1) is None and len(got) == 4, 10, "the partitions to go to the newcomer")
    finally:
        newcomer.close()


def test_sigterm_while_the_database_hangs_exits_0_within_the_bound(kafka, topic, worker_env, store, db_proxy,
                                                                   tmp_path: Path):
    env = {**worker_env, "CONSOLIDATOR_DATABASE_URL": worker_env["CONSOLIDATOR_DATABASE_URL"].replace(
               "127.0.0.1:3306", f"127.0.0.1:{db_proxy.port}"),
           "CONSOLIDATOR_WORKER_WRITE_WAIT_SECONDS": "2", "CONSOLIDATOR_WORKER_SHUTDOWN_SECONDS": "5"}
    group = env["CONSOLIDATOR_KAFKA_GROUP_ID"]
    kafka.produce(topic, 0, 100)
    with worker_process(env, "--role", "ingest") as process:
        wait_for(lambda: len(durable_positions(store, tmp_path / "dead.jsonl")) == 100, 30, "100 rows")
        wait_for(lambda: kafka.committed(group, topic) == _ends(kafka, topic), 10, "the interval commits")
        db_proxy.set("blackhole")
        kafka.produce(topic, 100, 100)
        time.sleep(1.5)  # the write of the new records is stuck now
        stdout, stderr, took = _terminated(process)
    assert process.returncode == 0, stderr
    assert took < 5 + 2, f"exit took {took:.1f} s, over the 5 s bound"
    assert "shutdown: the write in flight is abandoned; its records are delivered again (replays)" in \
        [line["message"] for line in log_lines(stdout)]
    db_proxy.set("forward")
    assert_committed_durable(kafka, group, topic, store, tmp_path / "dead.jsonl")


def test_a_second_signal_exits_at_once_and_nothing_is_lost(kafka, topic, worker_env, store, db_proxy,
                                                           tmp_path: Path):
    # the classic protocol, whose session timeout the client sets: the killed worker's partitions
    # go to the next one after 3 s (KIP-848's is the broker's, 45 s)
    env = {**worker_env, "CONSOLIDATOR_DATABASE_URL": worker_env["CONSOLIDATOR_DATABASE_URL"].replace(
        "127.0.0.1:3306", f"127.0.0.1:{db_proxy.port}"), "CONSOLIDATOR_KAFKA_GROUP_PROTOCOL": "classic",
        "CONSOLIDATOR_KAFKA_CONFIG": json.dumps({"session.timeout.ms": 3000, "heartbeat.interval.ms": 500})}
    group = env["CONSOLIDATOR_KAFKA_GROUP_ID"]
    kafka.produce(topic, 0, 100)
    with worker_process(env, "--role", "ingest") as process:
        wait_for(lambda: len(durable_positions(store, tmp_path / "dead.jsonl")) == 100, 30, "100 rows")
        db_proxy.set("blackhole")
        kafka.produce(topic, 100, 100)
        time.sleep(1.5)
        process.send_signal(signal.SIGTERM)  # the clean stop now waits up to 10 s for the stuck write
        time.sleep(0.5)
        stdout, _, took = _terminated(process)
    assert process.returncode == 128 + signal.SIGTERM
    assert took < 2, f"the second signal took {took:.1f} s"
    assert "second signal: exiting now; uncommitted records are delivered again" in \
        [line["message"] for line in log_lines(stdout)]
    db_proxy.set("forward")
    assert_committed_durable(kafka, group, topic, store, tmp_path / "dead.jsonl")
    with running(env, role="ingest"):
        wait_for(lambda: len(durable_positions(store, tmp_path / "dead.jsonl")) == 200, 30,
                 "every record, from the next worker")
        wait_for(lambda: kafka.committed(group, topic) == _ends(kafka, topic), 10, "the commits to the end")
    assert_committed_durable(kafka, group, topic, store, tmp_path / "dead.jsonl")


def test_sigterm_while_it_starts_exits_0_at_once(worker_env, db_proxy):
    """Stopped while it reads its database secret from an endpoint that hangs (a pod stopped as
    it starts): nothing was fetched, so it exits 0 at once instead of dying by the signal."""
    env = {**{k: v for k, v in worker_env.items() if k != "CONSOLIDATOR_DATABASE_URL"},
           "CONSOLIDATOR_DATABASE_SECRET_ARN": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:db-AbCdEf",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{db_proxy.port}", "AWS_DEFAULT_REGION": "eu-west-1",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    db_proxy.set("blackhole")
    with worker_process(env, "--role", "ingest") as process:
        wait_for(lambda: db_proxy.connections > 0 or process.poll() is not None, 30,
                 "the worker to ask for its secret")
        assert process.poll() is None, process.communicate()
        stdout, stderr, took = _terminated(process)
    assert process.returncode == 0, stderr
    assert took < 2, f"the stop took {took:.1f} s"
    assert "stop requested while starting; nothing fetched yet: exiting" in \
        [line["message"] for line in log_lines(stdout)]
