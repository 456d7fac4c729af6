"""``consolidator ingest --file``: a local file through the real ingest service."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import test_cli
from support import sql
from test_cli import cli, cli_json

from consolidator.rules.clock import SystemClock

ROOT = Path(__file__).resolve().parents[2]
NOW = SystemClock().now_ms()
env, flush_env, migrated = test_cli.env, test_cli.flush_env, test_cli.migrated  # fixtures


def value(location: str, order: str, quantity: int = 1, **extra) -> str:
    return json.dumps({"location_id": location, "order_id": order,
                       "items": [{"sku": "SKU-1", "quantity": quantity}], **extra})


def dead_letter(values: dict[str, str]) -> list[dict]:
    path = Path(values["CONSOLIDATOR_DEAD_LETTER_URL"].removeprefix("file://"))
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def rows(store) -> list[dict]:
    return sql(store, "SELECT src_topic, src_partition, src_offset, group_key, item_id, status FROM buffer_rows "
                      "ORDER BY src_offset")


def test_plain_values_get_line_positions_poison_is_dead_lettered_and_a_rerun_is_a_replay(env, migrated, tmp_path):
    path = tmp_path / "my orders.jsonl"
    path.write_text("\n".join([
        value("WH-1", "A1"),
        value("WH-1", "A2"),
        "{not json",                       # line 3: poison, not_json
        "",                                # line 4: blank, keeps its number
        value("WH-1", "A1", quantity=5),   # line 5: a newer event for A1: coalesced
        json.dumps({"order_id": "A9"}),    # line 6: poison, missing_group_key
        value("WH-2", "B1"),
    ]) + "\n")
    first = cli_json(env, "ingest", "--file", str(path))
    assert first["format"] == "values" and first["topic"] == "file.my-orders"
    assert (first["lines"], first["blank"], first["stored"], first["coalesced"], first["replayed"], first["poison"],
            first["failed"]) == (7, 1, 4, 1, 0, 2, 0)
    assert [(p["line"], p["reason"]) for p in first["poison_lines"]] == [(3, "not_json"), (6, "missing_group_key")]
    assert [(e["source"]["offset"], e["reason"]) for e in dead_letter(env)] == [(3, "not_json"),
                                                                               (6, "missing_group_key")]
    stored = rows(migrated)
    assert [(r["src_topic"], r["src_partition"], r["src_offset"], r["item_id"]) for r in stored] == [
        ("file.my-orders", 0, 2, "A2"), ("file.my-orders", 0, 5, "A1"), ("file.my-orders", 0, 7, "B1")]

    again = cli_json(env, "ingest", "--file", str(path))
    assert (again["stored"], again["coalesced"], again["replayed"], again["poison"]) == (0, 0, 6, 0)
    assert rows(migrated) == stored
    assert len(dead_letter(env)) == 2  # poison is not dead-lettered twice

    path.write_text(path.read_text() + value("WH-3", "C1") + "\n")  # the file grew: only the new line
    grown = cli_json(env, "ingest", "--file", str(path))
    assert (grown["stored"], grown["replayed"]) == (1, 6)


def test_human_summary_names_each_count_and_the_poison_lines(env, migrated, tmp_path):
    path = tmp_path / "orders.jsonl"
    path.write_text(value("WH-1", "A1") + "\n[1, 2]\n")
    result = cli(env, "ingest", "--file", str(path))
    assert result.exit_code == 0, result.output
    assert "line 2: poison (not_object" in result.stdout
    assert ("orders.jsonl as topic file.orders: 2 lines, 1 stored, 0 coalesced, 0 replayed, 1 poison, "
            "0 malformed, 0 failed") in result.stdout
    assert "reading" in result.stderr and "event values" in result.stderr


def test_envelope_lines_are_detected_and_a_malformed_line_never_stops_the_rest(env, migrated, tmp_path):
    good = {"topic": "orders", "partition": 1, "offset": 10, "timestamp": NOW, "key": "WH-1",
            "value": value("WH-1", "A1")}
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join([
        json.dumps(good),
        "not json at all",                                              # line 2
        json.dumps({k: v for k, v in good.items() if k != "offset"}),    # line 3: no offset
        json.dumps(good | {"offset": 11, "value": json.loads(value("WH-1", "A2"))}),  # value as an object
        json.dumps(good | {"offset": 12, "timestamp": "yesterday"}),    # line 5: bad timestamp
        json.dumps(good | {"offset": 13, "value": "{\"order_id\": 1}"}),  # line 6: poison
        json.dumps(good | {"offset": 14, "value": value("WH-2", "B1")}),
    ]) + "\n")
    result = cli(env, "ingest", "--file", str(path), "--json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["format"] == "envelope"
    assert [(m["line"], m["detail"].split(":")[0]) for m in report["malformed"]] == [
        (2, "not JSON"), (3, "offset must be an integer, got NoneType"), (5, "timestamp must be an integer, got str")]
    assert (report["stored"], report["poison"], report["failed"]) == (3, 1, 0)
    assert [(p["line"], p["source"]["offset"]) for p in report["poison_lines"]] == [(6, 13)]
    assert "line 2 malformed, not ingested" in result.stderr and "Kafka records" in result.stderr
    assert [(r["src_partition"], r["src_offset"]) for r in rows(migrated)] == [(1, 10), (1, 11), (1, 14)]


def test_progress_lines_on_stderr_and_stdout_holds_one_json_document(env, migrated, tmp_path):
    path = tmp_path / "many.jsonl"
    path.write_text("".join(value(f"WH-{i % 3}", f"O{i}") + "\n" for i in range(25)))
    result = cli(env, "ingest", "--file", str(path), "--progress-every", "10", "--json")
    assert result.exit_code == 0, result.output
    progress = [line for line in result.stderr.splitlines() if "lines read" in line]
    assert [line.split(": ")[1].split(" lines")[0] for line in progress] == ["10", "20"]
    assert json.loads(result.stdout)["stored"] == 25


def test_timestamp_field_stamps_the_record_and_a_missing_one_is_a_malformed_line(env, migrated, tmp_path):
    path = tmp_path / "stamped.jsonl"
    stamp = (NOW - 60_000) // 1000 * 1000
    iso = datetime.fromtimestamp(stamp / 1000, UTC).isoformat().replace("+00:00", "Z")
    path.write_text(value("WH-1", "A1", ts=iso) + "\n" + value("WH-1", "A2", ts=NOW - 30_000)
                    + "\n" + value("WH-1", "A3") + "\n")
    result = cli(env, "ingest", "--file", str(path), "--timestamp-field", "ts", "--json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["stored"] == 2 and [m["line"] for m in report["malformed"]] == [3]
    assert "'ts' is missing" in report["malformed"][0]["detail"]
    assert [r["record_ts_ms"] for r in sql(migrated, "SELECT record_ts_ms FROM buffer_rows ORDER BY src_offset")] == [
        stamp, NOW - 30_000]


def test_the_samples_use_distinct_partitions_so_feeding_both_replays_nothing(env, migrated):
    partitions = {}
    for name in ("msk-orders.json", "msk-poison-mix.json"):
        event = json.loads((ROOT / "events" / name).read_text())
        partitions[name] = {(r["topic"], r["partition"]) for batch in event["records"].values() for r in batch}
    assert not partitions["msk-orders.json"] & partitions["msk-poison-mix.json"]
    for name in ("msk-poison-mix.json", "msk-orders.json"):
        report = cli_json(env, "ingest", "--file", str(ROOT / "events" / name), "--restamp")
        assert report["format"] == "msk-event" and report["replayed"] == 0, report


def test_restamped_samples_are_published_by_the_first_flush_not_expired(flush_env, migrated, tmp_path):
    ttl_on = flush_env | {"CONSOLIDATOR_EVENT_TTL_SECONDS": "21600",  # the default 6 h
                          "CONSOLIDATOR_DEBOUNCE_SECONDS": "0.001"}
    stale = cli_json(ttl_on, "ingest", "--file", str(ROOT / "events/msk-orders.json"))
    assert stale["stored"] > 0
    result = cli(ttl_on, "flush", "--once")
    assert result.exit_code == 0, result.output
    assert f"0 batches published, 0 publish failures, {stale['stored']} expired, 0 throttled, 0 dead" in result.stdout

    restamped = cli_json(ttl_on, "ingest", "--file", str(ROOT / "events/msk-poison-mix.json"), "--restamp")
    plain = cli_json(ttl_on, "ingest", "--file", str(ROOT / "events/orders.jsonl"))  # stamped when read
    assert restamped["stored"] > 0 and plain["stored"] > 0 and plain["poison"] == 2
    result = cli(ttl_on, "flush", "--once")
    assert result.exit_code == 0, result.output
    assert ("batches published, 0 publish failures, 0 expired, 0 throttled, 0 dead" in result.stdout
            and "0 batches published" not in result.stdout)
    rows_made = restamped["stored"] + plain["stored"] - plain["coalesced"]  # stored counts coalesced records too
    assert migrated.row_counts() == {"EXPIRED": stale["stored"], "SENT": rows_made}
