"""Replay job: a hand-checked history gives the expected batches and report figures."""

from __future__ import annotations

import base64
import json

import pytest

from consolidator.rules.batch import batch_id
from consolidator.rules.buffer import BufferedEvent
from consolidator.rules.events import SourcePosition
from consolidator.rules.policy import FlushReason, Policy
from consolidator.rules.simulation import simulate_group
from consolidator.spark.replay import NamedPolicy, policy_grid, policy_name

B = 1_794_999_990_000  # a multiple of 30 s, so ticks fall on B + k * 30 s
S = 1000
POLICY = Policy(debounce_ms=60 * S, hard_window_ms=300 * S, max_batch_size=3, tick_interval_ms=30 * S)


def order(location: str, order_id: str, *items: tuple[str, int]) -> str:
    return json.dumps({"location_id": location, "order_id": order_id,
                       "items": [{"sku": s, "quantity": q} for s, q in items]})


def rec(offset: int, at_s: int, value: str | bytes) -> dict:
    line = {"topic": "orders", "partition": 0, "offset": offset, "timestamp": B + at_s * S, "key": None}
    if isinstance(value, bytes):
        line["value_b64"] = base64.b64encode(value).decode()
    else:
        line["value"] = value
    return line


# WH-1 goes quiet (idle), WH-2 fills up (full), WH-3 trickles on one order (hard window).
HISTORY = [
    rec(0, 0, order("WH-1", "A", ("SKU-1", 2))),
    rec(1, 10, order("WH-1", "A", ("SKU-1", 5))),
    rec(2, 20, order("WH-1", "B", ("SKU-2", 1))),
    rec(3, 5, order("WH-2", "X", ("SKU-9", 1))),
    rec(4, 6, order("WH-2", "Y", ("SKU-9", 2))),
    rec(5, 7, order("WH-2", "Z", ("SKU-8", 3))),
    *[rec(10 + i, 50 * i, order("WH-3", "P", ("SKU-3", i))) for i in range(7)],  # t = 0 .. 300 s
    rec(20, 40, b"\xff not json"),
    rec(0, 0, order("WH-1", "A", ("SKU-1", 2))),  # a duplicate position: a no-op
]


def pos(offset: int) -> SourcePosition:
    return SourcePosition("orders", 0, offset)


EXPECTED = {  # batch id -> (group, reason, flushed_at, member offsets, items, event_count)
    batch_id("WH-1", [pos(1), pos(2)]): ("WH-1", "idle", B + 90 * S, [1, 2],
                                          [{"sku": "SKU-1", "quantity": 5}, {"sku": "SKU-2", "quantity": 1}], 3),
    batch_id("WH-2", [pos(3), pos(4), pos(5)]): ("WH-2", "full", B + 30 * S, [3, 4, 5],
                                                  [{"sku": "SKU-8", "quantity": 3}, {"sku": "SKU-9", "quantity": 3}], 3),
    batch_id("WH-3", [pos(16)]): ("WH-3", "hard_window", B + 300 * S, [16],
                                   [{"sku": "SKU-3", "quantity": 6}], 7),
}


def test_policy_grid_names_every_combination():
    grid = policy_grid([60_000, 300_000], [1_800_000], [100, 500, 500], 30_000)
    assert [p.name for p in grid] == ["d60s-h1800s-n100-t30s", "d60s-h1800s-n500-t30s",
                                      "d300s-h1800s-n100-t30s", "d300s-h1800s-n500-t30s"]
    assert policy_name(Policy(1500, 2000, 5, 250)) == "d1500ms-h2s-n5-t250ms"


def test_simulation_ticks_until_nothing_is_pending():
    events = [BufferedEvent(pos(i), B + i * 45 * S, f"o{i}", (("s", 1),)) for i in range(4)]
    result = simulate_group("G", events, POLICY)
    # arrivals at 0, 45, 90, 135 s keep the group busy; 3 rows -> full at the tick after 90 s.
    assert [(b.reason, b.flushed_at_ms - B, len(b.members)) for b in result.batches] == [
        (FlushReason.FULL, 90 * S, 3), (FlushReason.IDLE, 210 * S, 1)]
    assert result.records_in == 4 and result.replayed == 0


@pytest.mark.spark
def test_replay_of_a_hand_checked_history(spark, tmp_path):
    from consolidator.cli.spark.report import write_report
    from consolidator.spark.figures import compute_figures
    from consolidator.spark.replay import replay, write_outputs
    from consolidator.spark.transforms import read_record_files

    source = tmp_path / "history.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in HISTORY))
    policies = [NamedPolicy("main", POLICY),
                NamedPolicy("big", Policy(60 * S, 300 * S, 500, 30 * S))]
    result = replay(read_record_files(spark, str(source)), policies).cache()

    main = {r["batch_id"]: r for r in result.where("kind = 'batch' AND policy = 'main'").collect()}
    assert set(main) == set(EXPECTED)
    for bid, (group, reason, flushed, offsets, items, events) in EXPECTED.items():
        message = json.loads(main[bid]["body"])
        assert (message["group_key"], message["flush_reason"], main[bid]["flushed_at_ms"]) == (group, reason, flushed)
        assert [m["offset"] for m in message["members"]] == offsets
        assert (message["items"], message["event_count"]) == (items, events)

    figures = {f.policy: f for f in compute_figures(result, policies)}
    f = figures["main"]
    assert (f.messages_in, f.dead_lettered, f.replayed, f.events_batched, f.unbatched) == (15, 1, 1, 13, 0)
    assert (f.batches_out, f.compaction_ratio) == (3, 4.333)
    assert (f.batch_size_min, f.batch_size_mean, f.batch_size_p50, f.batch_size_max) == (1, 2.0, 2.0, 3)
    # member latencies 23, 24, 25, 70, 90, 300 s (linear interpolation)
    assert (f.latency_p50_ms, f.latency_p95_ms, f.latency_p99_ms, f.latency_max_ms) == (
        47_500.0, 247_500.0, 289_500.0, 300_000)
    assert f.reasons == {"full": 1, "hard_window": 1, "idle": 1}
    assert f.batch_size_histogram == {"1": 1, "2": 1, "3-5": 1}
    # the worst groups, highest p95 first: WH-3's one row waited 300 s, WH-1's two 70 and 90 s
    assert [(g["group_key"], g["latency_p95_ms"], g["latency_max_ms"], g["batches"]) for g in f.worst_groups] == [
        ("WH-3", 300_000.0, 300_000, 1), ("WH-1", 89_000.0, 90_000, 1), ("WH-2", 24_900.0, 25_000, 1)]
    # with room for 500, WH-2 waits for its debounce instead: idle at 67 s -> tick 90 s
    assert figures["big"].reasons == {"hard_window": 1, "idle": 2}

    out = tmp_path / "out"
    write_outputs(result, str(out))
    lines = [json.loads(line) for p in sorted((out / "batches" / "policy=main").glob("part-*"))
             for line in p.read_text().splitlines()]
    assert [m["batch_id"] for m in lines] == [  # sorted by flushed_at
        batch_id("WH-2", [pos(3), pos(4), pos(5)]), batch_id("WH-1", [pos(1), pos(2)]), batch_id("WH-3", [pos(16)])]
    dead = [json.loads(line) for p in (out / "dead_letter").glob("part-*") for line in p.read_text().splitlines()]
    assert [(d["reason"], d["source"]["offset"], d["kind"]) for d in dead] == [("not_utf8", 20, "poison")]

    paths = write_report(list(figures.values()), tmp_path / "report")
    assert paths["chart"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = paths["markdown"].read_text()
    assert "| batches out | 3 | 3 |" in markdown and "one point per policy](chart.png)" in markdown
    assert '<img src="chart.png"' in paths["html"].read_text()

    # deterministic: the same input gives the same batches
    again = replay(read_record_files(spark, str(source)), policies)
    assert sorted(r["body"] for r in again.where("kind = 'batch'").collect()) == sorted(
        r["body"] for r in result.where("kind = 'batch'").collect())
    result.unpersist()


@pytest.mark.spark
def test_records_the_fast_path_cannot_prove_are_grouped_by_events_decode(spark):
    from consolidator.spark.replay import replay
    from consolidator.spark.transforms import records

    # duplicate keys: Python's json keeps the last one, so both records belong to group B
    values = ['{"location_id": "A", "location_id": "B", "order_id": "1"}',
              '{"location_id":"B","order_id":"2"}']
    frame = records(spark.createDataFrame(
        [("t", 0, i, B, None, v) for i, v in enumerate(values)],
        "topic string, partition int, offset long, timestamp long, key string, value string"))
    batches = replay(frame, [NamedPolicy("main", POLICY)]).where("kind = 'batch'").collect()
    assert [(r["group_key"], json.loads(r["body"])["item_ids"]) for r in batches] == [("B", ["1", "2"])]


@pytest.mark.spark
def test_groups_cut_across_arrow_batches_are_simulated_whole(spark, tmp_path):
    from consolidator.spark.replay import replay
    from consolidator.spark.transforms import read_record_files

    source = tmp_path / "history.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in HISTORY))
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    spark.conf.set(key, "2")  # every group of more than two records spans Arrow batches
    try:
        rows = replay(read_record_files(spark, str(source)), [NamedPolicy("main", POLICY)]).collect()
    finally:
        spark.conf.unset(key)
    assert sorted(r["batch_id"] for r in rows if r["kind"] == "batch") == sorted(EXPECTED)
    assert {r["group_key"]: (r["records_in"], r["replayed"]) for r in rows if r["kind"] == "summary"} == {
        "WH-1": (4, 1), "WH-2": (3, 0), "WH-3": (7, 0)}
