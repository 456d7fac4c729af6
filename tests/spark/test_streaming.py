"""Streaming aggregator on the mock Kafka cluster: idle, hard window, full, poison, and a
micro-batch re-run from the checkpoint republishing the same batch ids."""

from __future__ import annotations

import collections
import json
import sys
import threading
import time

import pytest

from consolidator.rules.batch import batch_id
from consolidator.rules.events import SourcePosition
from consolidator.rules.policy import Policy
from consolidator.spark.delivery import BatchWriter
from consolidator.spark.streaming import StreamConfig, start

pytestmark = pytest.mark.spark


def order(location: str, order_id: str, quantity: int = 1) -> bytes:
    return json.dumps({"location_id": location, "order_id": order_id,
                       "items": [{"sku": "SKU-1", "quantity": quantity}]}).encode()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def read_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(condition, query, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise query.exception()
        result = condition()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"condition not met within {timeout_s} s; last progress {query.lastProgress}")


def test_idle_hard_window_full_and_poison(spark, kafka, tmp_path):
    topic = kafka.topic("orders")
    out, dead = tmp_path / "batches.jsonl", tmp_path / "dead.jsonl"
    config = StreamConfig(kafka.bootstrap, topic, f"file://{out}", f"file://{dead}", str(tmp_path / "ckpt"),
                          policy=Policy(debounce_ms=3_000, hard_window_ms=5_000, max_batch_size=3,
                                        tick_interval_ms=1_000),
                          trigger_ms=250, source="python")
    # warm-up: the first micro-batch starts the Python workers and the state store (seconds on
    # a busy machine); the timed scenario starts once it is done.
    kafka.produce(topic, [(b"W", order("W", "w1"), now_ms())], partition=0)
    query = start(spark, config)
    wait_for(lambda: any(p["numInputRows"] for p in query.recentProgress), query, timeout_s=120)
    kafka.produce(topic, [(b"Q", order("Q", "q1"), now_ms()), (b"Q", order("Q", "q2"), now_ms()),
                          *[(b"F", order("F", f"f{i}"), now_ms()) for i in range(4)],
                          (b"X", b"\xffjunk", now_ms())], partition=0)
    stop = threading.Event()

    def trickle() -> None:  # one order of group T every 0.5 s: never idle, so the hard window fires
        i = 0
        while not stop.is_set():
            kafka.produce(topic, [(b"T", order("T", "t1", i), now_ms())], partition=1)
            i += 1
            stop.wait(0.5)

    producer = threading.Thread(target=trickle, daemon=True)
    producer.start()
    try:
        def done():
            batches = read_lines(out)
            reasons = {(b["group_key"], b["flush_reason"]) for b in batches}
            wanted = {("Q", "idle"), ("F", "full"), ("T", "hard_window")}
            return batches if wanted <= reasons and read_lines(dead) else None

        batches = wait_for(done, query, timeout_s=150)
    finally:
        stop.set()
        producer.join()
        query.stop()

    by_group = {}
    for b in batches:
        by_group.setdefault(b["group_key"], []).append(b)
    assert [(b["flush_reason"], b["item_ids"]) for b in by_group["Q"]] == [("idle", ["q1", "q2"])]
    full = by_group["F"][0]
    assert (full["flush_reason"], full["item_ids"], [m["offset"] for m in full["members"]]) == (
        "full", ["f0", "f1", "f2"], [3, 4, 5])
    assert full["batch_id"] == batch_id("F", [SourcePosition(topic, 0, o) for o in (3, 4, 5)])
    hard = by_group["T"][0]
    assert hard["flush_reason"] == "hard_window" and hard["item_ids"] == ["t1"] and hard["event_count"] > 1
    # the newest event of the coalesced row wins: its quantity is the last offset's
    assert hard["items"] == [{"sku": "SKU-1", "quantity": hard["members"][0]["offset"]}]
    [entry] = read_lines(dead)
    assert (entry["reason"], entry["source"]["offset"], entry["kind"]) == ("not_utf8", 7, "poison")


def test_a_micro_batch_rerun_from_the_checkpoint_republishes_the_same_batch_ids(spark, kafka, tmp_path):
    topic, out_topic = kafka.topic("orders"), kafka.topic("batches")
    config = StreamConfig(kafka.bootstrap, topic, f"kafka://{kafka.bootstrap}/{out_topic}",
                          f"file://{tmp_path / 'dead.jsonl'}", str(tmp_path / "ckpt"),
                          policy=Policy(debounce_ms=600_000, hard_window_ms=600_000, max_batch_size=2),
                          trigger_ms=250, source="python")
    kafka.produce(topic, [(b"G", order("G", f"o{i}"), now_ms()) for i in range(4)], partition=0)

    class CrashAfterPublishing(BatchWriter):
        def __call__(self, df, epoch_id):
            super().__call__(df, epoch_id)
            if not df.isEmpty():
                raise RuntimeError(f"crash after publishing micro-batch {epoch_id}")

    crashing = CrashAfterPublishing(config.sink_url, config.dead_letter_url)
    query = start(spark, config, writer=crashing)
    with pytest.raises(Exception, match="crash after publishing"):
        query.awaitTermination(150)
    crashing.close()
    first = sorted(json.loads(m.value())["batch_id"] for m in kafka.consume_all(out_topic))

    writer = BatchWriter(config.sink_url, config.dead_letter_url)
    query = start(spark, config, writer=writer)  # same checkpoint: the failed micro-batch runs again
    try:
        wait_for(lambda: len(kafka.consume_all(out_topic)) >= 4, query, timeout_s=120)
    finally:
        query.stop()
        writer.close()
    published = [json.loads(m.value()) for m in kafka.consume_all(out_topic)]
    expected = sorted(batch_id("G", [SourcePosition(topic, 0, a), SourcePosition(topic, 0, a + 1)])
                      for a in (0, 2))
    assert first == expected
    assert sorted(m["batch_id"] for m in published) == sorted(expected * 2)
    assert {m["flush_reason"] for m in published} == {"full"}


class FailingInPartition0:
    """Sink opener for the executors: in Spark partition 0, the sink does not confirm anything
    until ``marker`` exists (the first attempt creates it); elsewhere, the real sink."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __call__(self, url: str):
        from consolidator.sinks import sink_from_url

        real = sink_from_url(url)
        marker = self.marker

        class Sink:
            def publish(self, batches):
                from pathlib import Path

                from pyspark import TaskContext

                if TaskContext.get().partitionId() == 0 and not Path(marker).exists():
                    Path(marker).touch()
                    return {i: "injected: broker down" for i in range(len(batches))}
                return real.publish(batches)

            def close(self):
                real.close()

        return Sink()


def test_a_sink_failure_in_one_partition_fails_the_micro_batch_and_the_restart_republishes(
        spark, kafka, tmp_path):
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the opener runs on executors
    topic, out_topic = kafka.topic("orders"), kafka.topic("batches")
    config = StreamConfig(kafka.bootstrap, topic, f"kafka://{kafka.bootstrap}/{out_topic}",
                          f"file://{tmp_path / 'dead.jsonl'}", str(tmp_path / "ckpt"),
                          policy=Policy(debounce_ms=600_000, hard_window_ms=600_000, max_batch_size=2),
                          trigger_ms=250, source="python")
    groups = [f"G{i}" for i in range(8)]  # spread over both shuffle partitions
    kafka.produce(topic, [(g.encode(), order(g, f"o{i}"), now_ms()) for g in groups for i in range(2)],
                  partition=0)
    positions = {g: [SourcePosition(topic, 0, 2 * n), SourcePosition(topic, 0, 2 * n + 1)]
                 for n, g in enumerate(groups)}
    expected = sorted(batch_id(g, positions[g]) for g in groups)
    marker = tmp_path / "failed-once"

    failing = BatchWriter(config.sink_url, config.dead_letter_url, sink_opener=FailingInPartition0(str(marker)))
    query = start(spark, config, writer=failing)
    with pytest.raises(Exception, match="injected: broker down"):
        query.awaitTermination(150)
    assert marker.exists()
    first = [json.loads(m.value())["batch_id"] for m in kafka.consume_all(out_topic)]
    assert len(first) < len(expected) and set(first) <= set(expected)  # partition 0's never went out

    writer = BatchWriter(config.sink_url, config.dead_letter_url, sink_opener=FailingInPartition0(str(marker)))
    query = start(spark, config, writer=writer)  # same checkpoint: the failed micro-batch runs again
    try:
        wait_for(lambda: len(kafka.consume_all(out_topic)) >= len(first) + len(expected), query, timeout_s=120)
    finally:
        query.stop()
        writer.close()
    published = [json.loads(m.value())["batch_id"] for m in kafka.consume_all(out_topic)]
    again = collections.Counter(published) - collections.Counter(first)  # what the restart published
    assert set(published) == set(expected) and set(again) == set(expected), "same ids, every one again"


def test_state_is_one_row_per_shard_not_per_group(spark, kafka, tmp_path):
    """Many groups share a few state keys (one Python call and a few state round trips per
    shard and micro-batch), and each group still gets its own batches and ids."""
    topic = kafka.topic("orders")
    out = tmp_path / "batches.jsonl"
    config = StreamConfig(kafka.bootstrap, topic, f"file://{out}", f"file://{tmp_path / 'dead.jsonl'}",
                          str(tmp_path / "ckpt"), policy=Policy(debounce_ms=600_000, hard_window_ms=600_000,
                                                                max_batch_size=2),
                          trigger_ms=250, source="python", state_shards=3)
    groups = [f"S{i}" for i in range(12)]
    kafka.produce(topic, [(g.encode(), order(g, f"o{i}"), now_ms()) for g in groups for i in range(3)],
                  partition=0)
    query = start(spark, config)
    try:
        batches = wait_for(lambda: len(read_lines(out)) >= len(groups) and read_lines(out), query, timeout_s=150)
        progress = wait_for(lambda: [p for p in query.recentProgress if p["numInputRows"]], query, timeout_s=30)
    finally:
        query.stop()
    expected = sorted(batch_id(g, [SourcePosition(topic, 0, 3 * n), SourcePosition(topic, 0, 3 * n + 1)])
                      for n, g in enumerate(groups))
    assert sorted(b["batch_id"] for b in batches) == expected  # the third order of each group waits
    state_rows = progress[-1]["stateOperators"][0]["numRowsTotal"]
    assert 1 <= state_rows <= 3, f"{state_rows} state rows hold the pending rows of {len(groups)} groups"


def test_a_restart_under_another_kind_of_policy_keeps_the_pending_rows(spark, kafka, tmp_path):
    """A plain policy keeps a shard's rows as columns, a rate-limited one per group: a restart
    from the same checkpoint with the other kind converts the stored rows, losing none."""
    from consolidator.rules.policy import RateLimit

    topic = kafka.topic("orders")
    out = tmp_path / "batches.jsonl"
    plain = Policy(debounce_ms=600_000, hard_window_ms=600_000, max_batch_size=2)
    limited = Policy(debounce_ms=600_000, hard_window_ms=600_000, max_batch_size=2, rate_limit=RateLimit(100, 1_000))
    groups = [f"P{i}" for i in range(4)]
    offsets = {g: [] for g in groups}

    def published() -> set[str]:  # a stop between a write and its commit republishes the same ids
        return {b["batch_id"] for b in read_lines(out)}

    def phase(policy: Policy, orders: int, batches: int) -> None:
        first = sum(map(len, offsets.values()))
        kafka.produce(topic, [(g.encode(), order(g, f"o{first + n}"), now_ms())
                              for n, g in enumerate(g for g in groups for _ in range(orders))], partition=0)
        for n, g in enumerate(g for g in groups for _ in range(orders)):
            offsets[g].append(first + n)
        config = StreamConfig(kafka.bootstrap, topic, f"file://{out}", f"file://{tmp_path / 'dead.jsonl'}",
                              str(tmp_path / "ckpt"), policy=policy, trigger_ms=250, source="python")
        query = start(spark, config)
        try:
            wait_for(lambda: len(published()) >= batches, query, timeout_s=150)
        finally:
            query.stop()

    phase(plain, 3, batches=4)  # per group: a full batch, one row left (stored as columns)
    phase(limited, 2, batches=8)  # with it: a full batch, one row left (stored per group)
    phase(plain, 1, batches=12)  # with it: a full batch
    expected = sorted(batch_id(g, [SourcePosition(topic, 0, o) for o in offsets[g][a:a + 2]])
                      for g in groups for a in (0, 2, 4))
    assert sorted(published()) == expected


def test_a_generic_shape_streams_version_2_batches_with_each_members_event(spark, kafka, tmp_path):
    """The streaming job decodes with the shape of its field names and builds the
    version 2 message as the flush does (members with item id and event, aggregates)."""
    from consolidator.rules.events import FieldNames
    from consolidator.rules.shape import Shape, parse_outputs

    shape = Shape(parse_outputs('[{"name": "users", "op": "count"}, {"name": "spent", "op": "sum", "path": "amount"},'
                                ' {"name": "last_page", "op": "last", "path": "page"}]'), full_payload=True)
    topic = kafka.topic("clicks")
    out, dead = tmp_path / "batches.jsonl", tmp_path / "dead.jsonl"
    config = StreamConfig(kafka.bootstrap, topic, f"file://{out}", f"file://{dead}", str(tmp_path / "ckpt"),
                          policy=Policy(debounce_ms=2_000, hard_window_ms=60_000, max_batch_size=50,
                                        tick_interval_ms=1_000),
                          names=FieldNames(group_key="tenant", item_id="user", shape=shape),
                          trigger_ms=250, source="python")
    events = [{"tenant": "acme", "user": "u1", "amount": 5, "page": "/a", "items": "unrelated"},
              {"tenant": "acme", "user": 7, "amount": 2.5, "page": "/b"},
              {"tenant": "acme", "user": "u1", "amount": 10, "page": "/c"},
              {"tenant": "acme", "user": "u2", "amount": "lots"}]
    kafka.produce(topic, [(b"acme", json.dumps(e).encode(), now_ms()) for e in events], partition=0)
    query = start(spark, config)
    try:
        [batch] = wait_for(lambda: read_lines(out), query, timeout_s=150)
        [entry] = wait_for(lambda: read_lines(dead), query, timeout_s=30)
    finally:
        query.stop()
    assert batch["schema_version"] == 2 and batch["aggregates"] == {"users": 2, "spent": 12.5, "last_page": "/c"}
    assert [(m["offset"], m["item_id"], m["event"]) for m in batch["members"]] == [(1, "7", events[1]),
                                                                                    (2, "u1", events[2])]
    assert (entry["reason"], entry["detail"]) == ("bad_value", "amount: expected number, got string")
