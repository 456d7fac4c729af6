"""One policy, two engines: the serverless path (real ingest and flush services on MariaDB,
manual clock) and the Spark replay produce identical batches from one event history."""

from __future__ import annotations

import dataclasses
import json
import os
import random
from datetime import UTC, datetime

import pytest

from consolidator.rules.clock import ManualClock
from consolidator.rules.events import FieldNames, KafkaRecord
from consolidator.rules.policy import Policy, RateLimit, next_tick_ms
from consolidator.services.flush import FlushService
from consolidator.services.ingest import IngestService
from consolidator.sinks import sink_from_url
from consolidator.sinks.deadletter import FileDeadLetter

pytestmark = pytest.mark.spark

POLICY = Policy(debounce_ms=60_000, hard_window_ms=300_000, max_batch_size=4, tick_interval_ms=30_000)
DEFAULT_NAMES = FieldNames()
START = int(datetime(2026, 11, 30, 23, 40, tzinfo=UTC).timestamp() * 1000)  # crosses into December


def history(seed: int = 7) -> list[KafkaRecord]:
    """~300 records on 2 partitions over ~50 minutes: bursts (full), trickles (hard window), quiet
    spells (idle), repeated items (coalescing, also out of offset order), re-delivered positions,
    poison records, and a month boundary (one PENDING row per item per monthly bucket)."""
    rng = random.Random(seed)
    offsets = {0: 0, 1: 0}
    last = {0: 0, 1: 0}
    records: list[KafkaRecord] = []
    at = START
    for _ in range(280):
        at += rng.choice([0, 1_000, 5_000, 20_000, 45_000, 70_000]) // rng.choice([1, 1, 2, 4])
        partition = rng.randrange(2)
        # producer clocks: timestamps not in offset order across partitions. Within a partition the
        # serverless harness below ingests at each record's timestamp, so they must follow offset
        # order there, as Lambda delivers a partition (a lower offset after a higher one is a replay).
        jitter = max(rng.choice([0, 0, 0, -3_000]), last[partition] - at)
        group = f"WH-{rng.randrange(5)}"
        if rng.random() < 0.03:
            value = rng.choice([b"\xff\xfe", b"[1, 2]", b'{"order_id": "x"}'])
        else:
            items = [{"sku": f"SKU-{rng.randrange(4)}", "quantity": rng.randrange(5)}
                     for _ in range(rng.randrange(1, 3))]
            value = json.dumps({"location_id": group, "order_id": f"{group}-O{rng.randrange(12)}",
                                "items": items}).encode()
        records.append(KafkaRecord("orders", partition, offsets[partition], at + jitter, group.encode(), value))
        last[partition] = at + jitter
        offsets[partition] += 1
        if rng.random() < 0.04:  # at-least-once delivery upstream: the same position again
            records.append(records[rng.randrange(len(records))])
    return records


def serverless(records: list[KafkaRecord], store, tmp_path, policy: Policy = POLICY,
               names: FieldNames = DEFAULT_NAMES, max_event_bytes: int = 262_144,
               values=None) -> tuple[list[dict], list[dict]]:
    """Each record ingested with the clock at its timestamp; a flush tick at every multiple of
    tick_interval, after every record with timestamp <= tick; ticks go on until nothing is pending.
    ``values``: the ingest service's value decoder (None: JSON)."""
    clock = ManualClock(0)
    dead_letter = FileDeadLetter(tmp_path / "serverless-dead.jsonl")
    ingest = IngestService(store, dead_letter, names, max_event_bytes, clock, values=values)
    sink = sink_from_url(f"file://{tmp_path / 'serverless-batches.jsonl'}")
    flush = FlushService(store=store, sink=sink, dead_letter=dead_letter, policy=policy, clock=clock,
                         names=names, max_attempts=3, max_rows_per_tick=1_000_000)
    ordered = sorted(records, key=lambda r: (r.timestamp_ms, r.position))
    tick, index = next_tick_ms(ordered[0].timestamp_ms, policy), 0
    while True:
        while index < len(ordered) and ordered[index].timestamp_ms <= tick:
            clock.set(ordered[index].timestamp_ms)
            assert not ingest.ingest([ordered[index]]).failed
            index += 1
        clock.set(tick)
        report = flush.tick()
        assert report.publish_failures == 0 and report.skipped is None
        if index == len(ordered) and not store.pending_group_stats():
            break
        tick += policy.tick_interval_ms
    return sink.read(), dead_letter.read()


def test_serverless_path_and_spark_replay_yield_identical_batches(spark, store, tmp_path):
    from consolidator.spark.replay import NamedPolicy, replay
    from consolidator.spark.transforms import records as to_records

    records = history()
    lambda_batches, lambda_dead = serverless(records, store, tmp_path)

    frame = to_records(spark.createDataFrame(
        [(r.topic, r.partition, r.offset, r.timestamp_ms, r.key, r.value) for r in records],
        "topic string, partition int, offset long, timestamp long, key binary, value binary"))
    result = replay(frame, [NamedPolicy("same", POLICY)]).collect()
    spark_batches = [json.loads(r["body"]) for r in result if r["kind"] == "batch"]
    spark_dead = [json.loads(r["body"]) for r in result if r["kind"] == "dead_letter"]

    def by_id(messages: list[dict]) -> dict[str, dict]:
        return {m["batch_id"]: m for m in messages}

    assert len(lambda_batches) == len(by_id(lambda_batches))  # each batch published once here
    assert by_id(spark_batches) == by_id(lambda_batches)  # same ids, members, reasons, items, times
    assert {b["flush_reason"] for b in spark_batches} == {"idle", "hard_window", "full"}
    assert any(m["event_count"] > len(m["members"]) for m in spark_batches)  # coalescing happened
    months = {b["first_event_at"][:7] for b in spark_batches} | {b["last_event_at"][:7] for b in spark_batches}
    assert months == {"2026-11", "2026-12"}

    def poison(entries: list[dict]) -> list[tuple]:
        return sorted((e["reason"], e["source"]["partition"], e["source"]["offset"]) for e in entries)

    assert poison(spark_dead) and poison(spark_dead) == sorted(set(poison(lambda_dead)))


# 1 batch per 3 minutes per group, 4-minute TTL: busy groups build a backlog that partly expires
LIMITED = Policy(debounce_ms=60_000, hard_window_ms=300_000, max_batch_size=4, tick_interval_ms=30_000,
                 rate_limit=RateLimit(1, 180_000), ttl_ms=240_000)


def test_identical_batches_and_expiries_with_throttling_and_ttl(spark, store, tmp_path):
    from consolidator.spark.replay import NamedPolicy, replay
    from consolidator.spark.transforms import records as to_records

    records = history(seed=11)
    lambda_batches, lambda_dead = serverless(records, store, tmp_path, LIMITED)
    frame = to_records(spark.createDataFrame(
        [(r.topic, r.partition, r.offset, r.timestamp_ms, r.key, r.value) for r in records],
        "topic string, partition int, offset long, timestamp long, key binary, value binary"))
    result = replay(frame, [NamedPolicy("limited", LIMITED)]).collect()
    spark_batches = {m["batch_id"]: m for m in (json.loads(r["body"]) for r in result if r["kind"] == "batch")}
    spark_expired = [json.loads(r["body"]) for r in result if r["kind"] == "expired"]

    assert len(lambda_batches) == len({m["batch_id"] for m in lambda_batches})
    assert spark_batches == {m["batch_id"]: m for m in lambda_batches}  # ids, members, reasons, held_back_ms
    held = [m["held_back_ms"] for m in spark_batches.values() if "held_back_ms" in m]
    assert held and min(held) > 0
    lambda_expired = [e for e in lambda_dead if e["reason"] == "expired"]
    assert spark_expired and sorted(spark_expired, key=json.dumps) == sorted(lambda_expired, key=json.dumps)
    batched = {(p["partition"], p["offset"]) for m in spark_batches.values() for p in m["members"]}
    assert not batched & {(e["source"]["partition"], e["source"]["offset"]) for e in spark_expired}


RENAMES = {"location_id": "site", "order_id": "ref", "items": "lines", "sku": "product", "quantity": "count"}
RENAMED_ENVIRONMENT = {
    "CONSOLIDATOR_GROUP_KEY_FIELD": "site", "CONSOLIDATOR_ITEM_ID_FIELD": "ref", "CONSOLIDATOR_ITEMS_FIELD": "lines",
    "CONSOLIDATOR_SKU_FIELD": "product", "CONSOLIDATOR_QUANTITY_FIELD": "count",
    "CONSOLIDATOR_DEBOUNCE_SECONDS": "60", "CONSOLIDATOR_HARD_WINDOW_SECONDS": "300",
    "CONSOLIDATOR_MAX_BATCH_SIZE": "4", "CONSOLIDATOR_TICK_INTERVAL_SECONDS": "30",
    "CONSOLIDATOR_RATE_LIMIT_BATCHES": "1", "CONSOLIDATOR_RATE_LIMIT_PERIOD_SECONDS": "120",
    "CONSOLIDATOR_EVENT_TTL_SECONDS": "0",
}


def _renamed(value: object) -> object:
    if isinstance(value, dict):
        return {RENAMES.get(k, k): _renamed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v) for v in value]
    return value


def test_renamed_fields_and_environment_policy_give_identical_batches_on_both_engines(
        spark, store, database_url, tmp_path, monkeypatch):
    """Every field renamed and the policy given only by the environment: the ingest/flush path
    (settings read as the Lambda handlers read them) and ``consolidator spark replay`` (the
    command, options unset) decode the same events and publish the same batches."""
    from typer.testing import CliRunner

    from consolidator.cli.spark.commands import spark_app
    from consolidator.settings import IngestSettings, PolicySettings, load_settings

    for name in [n for n in os.environ if n.startswith("CONSOLIDATOR_")]:
        monkeypatch.delenv(name)
    for name, value in {**RENAMED_ENVIRONMENT, "CONSOLIDATOR_DATABASE_URL": database_url,
                        "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{tmp_path / 'dead.jsonl'}"}.items():
        monkeypatch.setenv(name, value)
    records = [KafkaRecord(r.topic, r.partition, r.offset, r.timestamp_ms, r.key,
                           json.dumps(_renamed(json.loads(r.value))).encode())
               for r in history(seed=5) if r.value != b"\xff\xfe"]
    ingest_settings, policy_settings = load_settings(IngestSettings), load_settings(PolicySettings)
    lambda_batches, _ = serverless(records, store, tmp_path, policy_settings.policy(),
                                   ingest_settings.field_names(), ingest_settings.max_event_bytes)

    source = tmp_path / "records.jsonl"
    source.write_text("".join(json.dumps({"topic": r.topic, "partition": r.partition, "offset": r.offset,
                                          "timestamp": r.timestamp_ms, "key": r.key.decode(),
                                          "value": r.value.decode()}) + "\n" for r in records))
    result = CliRunner().invoke(spark_app, ["replay", "--input", str(source), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "d60s-h300s-n4-t30s-r1per120s:" in result.output
    spark_batches = [json.loads(line) for path in sorted((tmp_path / "out" / "batches").rglob("part-*"))
                     for line in path.read_text().splitlines()]

    assert lambda_batches and len(lambda_batches) == len({m["batch_id"] for m in lambda_batches})
    assert {m["batch_id"]: m for m in spark_batches} == {m["batch_id"]: m for m in lambda_batches}
    assert {b["flush_reason"] for b in spark_batches} >= {"idle", "full"}
    assert sum(len(m["members"]) for m in spark_batches) > len(records) // 2  # the renamed events were batched


def big_history() -> list[KafkaRecord]:
    """Orders of one warehouse whose quantities of one sku add up past 2**63-1 within a claim
    (4 * 10**18 each, a valid event on its own), next to ordinary ones, and one item that comes
    back with a small quantity (its newest row counts)."""
    records = []
    for offset in range(14):
        quantity = 4 * 10**18 if offset % 3 else 7
        order = "O-BACK" if offset in (2, 11) else f"O{offset}"
        value = json.dumps({"location_id": "WH-BIG", "order_id": order,
                            "items": [{"sku": "S", "quantity": quantity if offset != 11 else 1},
                                      {"sku": "T", "quantity": offset}]}).encode()
        records.append(KafkaRecord("orders", offset % 2, offset // 2, START + offset * 7_000, b"WH-BIG", value))
    return records


@pytest.mark.parametrize("policy", [POLICY, dataclasses.replace(POLICY, max_batch_size=10, max_batch_bytes=100_000)],
                         ids=["columnar", "reference"])
def test_identical_batches_split_where_a_sum_would_pass_int64(spark, store, tmp_path, policy):
    from consolidator.rules.events import MAX_QUANTITY
    from consolidator.spark.replay import NamedPolicy, replay
    from consolidator.spark.transforms import records as to_records

    records = big_history()
    lambda_batches, _ = serverless(records, store, tmp_path, policy)
    frame = to_records(spark.createDataFrame(
        [(r.topic, r.partition, r.offset, r.timestamp_ms, r.key, r.value) for r in records],
        "topic string, partition int, offset long, timestamp long, key binary, value binary"))
    result = replay(frame, [NamedPolicy("big", policy)]).collect()
    spark_batches = {m["batch_id"]: m for m in (json.loads(r["body"]) for r in result if r["kind"] == "batch")}

    assert spark_batches == {m["batch_id"]: m for m in lambda_batches}
    quantities = [i["quantity"] for m in lambda_batches for i in m["items"]]
    assert max(quantities) <= MAX_QUANTITY < 3 * 4 * 10**18  # a Java long holds every sum; three do not fit one
    assert len(records) - 1 <= sum(len(m["members"]) for m in lambda_batches) <= len(records)  # none lost
    assert len(lambda_batches) > len(records) // policy.max_batch_size  # claims were split


EVENT_TIME_NAMES = FieldNames(event_time=("ts",))


def timed_history(seed: int) -> list[KafkaRecord]:
    """:func:`history` with each value's own time in ``ts``: most a little before its record
    timestamp, some hours late (older than the TTL when they arrive), some in the other month,
    a few missing or without a zone (poison). A re-delivered position gets the same value: a
    position identifies one record."""
    out = []
    for r in history(seed):
        rng = random.Random(f"{seed}/{r.partition}/{r.offset}")
        try:
            document = json.loads(r.value)
        except ValueError:
            out.append(r)
            continue
        if not isinstance(document, dict) or "items" not in document:
            out.append(r)
            continue
        lag = rng.choice([0, 2_000, 60_000, 30 * 60_000, 5 * 3_600_000])
        stamp = r.timestamp_ms - lag
        pick = rng.random()
        if pick < 0.03:
            document.pop("ts", None)
        elif pick < 0.05:
            document["ts"] = "2026-11-30T23:00:00"
        elif pick < 0.5:
            document["ts"] = datetime.fromtimestamp(stamp / 1000, UTC).isoformat()
        else:
            document["ts"] = stamp
        out.append(r._replace(value=json.dumps(document).encode()))
    return out


def test_identical_batches_and_expiries_with_an_event_time_field(spark, store, tmp_path):
    from consolidator.spark.replay import NamedPolicy, replay
    from consolidator.spark.transforms import records as to_records

    records = timed_history(seed=5)
    policy = dataclasses.replace(LIMITED, ttl_ms=3_600_000)
    lambda_batches, lambda_dead = serverless(records, store, tmp_path, policy, EVENT_TIME_NAMES)
    frame = to_records(spark.createDataFrame(
        [(r.topic, r.partition, r.offset, r.timestamp_ms, r.key, r.value) for r in records],
        "topic string, partition int, offset long, timestamp long, key binary, value binary"))
    result = replay(frame, [NamedPolicy("timed", policy)], EVENT_TIME_NAMES).collect()
    spark_batches = {m["batch_id"]: m for m in (json.loads(r["body"]) for r in result if r["kind"] == "batch")}
    spark_expired = [json.loads(r["body"]) for r in result if r["kind"] == "expired"]
    spark_dead = [json.loads(r["body"]) for r in result if r["kind"] == "dead_letter"]

    assert spark_batches == {m["batch_id"]: m for m in lambda_batches}  # event times in first/last_event_at
    lambda_expired = [e for e in lambda_dead if e["reason"] == "expired"]
    assert spark_expired and sorted(spark_expired, key=json.dumps) == sorted(lambda_expired, key=json.dumps)
    assert any(e["age_ms"] > 3_600_000 * 4 for e in spark_expired)  # late arrivals expired at their first tick

    def poison(entries: list[dict]) -> list[tuple]:
        return sorted((e["reason"], e["source"]["partition"], e["source"]["offset"], e.get("detail"))
                      for e in entries if e["reason"] != "expired")

    assert "bad_event_time" in {p[0] for p in poison(spark_dead)}
    assert sorted(set(poison(spark_dead))) == sorted(set(poison(lambda_dead)))  # a re-delivered position: twice
