"""``consolidator kafka serve`` / ``kafka produce``: a local Kafka to try things on."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

CLI = [sys.executable, "-c", "from consolidator.cli import app; app(prog_name='consolidator')"]


def serve() -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([*CLI, "kafka", "serve"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    bootstrap = process.stdout.readline().strip()
    assert bootstrap, process.communicate(timeout=10)
    return process, bootstrap


def consume(bootstrap: str, topic: str) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "log_level": 3})
    try:
        found = []
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        for p in sorted(metadata.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                consumer.assign([TopicPartition(topic, p, low)])
                got = []
                while len(got) < high - low:  # ask for what is missing: consume() waits for that many
                    got += [m for m in consumer.consume(min(100, high - low - len(got)), timeout=5)
                            if m.error() is None]
                found += got
        return found
    finally:
        consumer.close()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_serve_prints_its_bootstrap_takes_a_produced_file_and_stops_cleanly(tmp_path: Path, stop):
    process, bootstrap = serve()
    try:
        assert all(":" in server for server in bootstrap.split(",")) and len(bootstrap.split(",")) == 3
        events = tmp_path / "orders.jsonl"
        events.write_text("\n".join([
            json.dumps({"location_id": "WH-1", "order_id": "A1", "items": []}),
            "",
            json.dumps({"location_id": "WH-2", "order_id": "B1", "items": []}),
            "{not json",
            "[" * 100_000 + "]" * 100_000,  # too deep for any parser: produced as it is, keyless
        ]) + "\n")
        produced = subprocess.run([*CLI, "kafka", "produce", "--bootstrap-servers", bootstrap, "--topic", "orders",
                                   str(events), "--json"], check=False, capture_output=True, text=True, timeout=60)
        assert produced.returncode == 0, produced.stderr
        report = json.loads(produced.stdout)
        assert (report["produced"], report["blank_lines"], report["acknowledged"], report["ok"]) == (4, 1, 4, True)
        messages = consume(bootstrap, "orders")
        assert sorted((m.value(), m.key()) for m in messages) == sorted([
            (events.read_text().splitlines()[0].encode(), b"WH-1"),
            (events.read_text().splitlines()[2].encode(), b"WH-2"),
            (b"{not json", None), (events.read_text().splitlines()[4].encode(), None)])
    finally:
        process.send_signal(stop)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("local Kafka (librdkafka mock cluster, 3 brokers) at "), stderr
    assert lines[1] == f"local Kafka at {bootstrap} stopped ({stop.name}); its topics are gone"


def test_produce_to_nowhere_exits_1_and_says_so(tmp_path: Path):
    events = tmp_path / "one.jsonl"
    events.write_text('{"location_id": "WH-1"}\n')
    produced = subprocess.run([*CLI, "kafka", "produce", "--bootstrap-servers", "127.0.0.1:1", "--topic", "t",
                               "--timeout-seconds", "1", str(events)], check=False, capture_output=True, text=True, timeout=60)
    assert produced.returncode == 1, produced.stderr
    assert "0 of 1 messages" in produced.stdout and "not delivered" in produced.stderr
    assert "|rdkafka#" not in produced.stderr  # librdkafka's lines go through the logger


def test_produce_stamps_records_with_the_timestamp_field_and_counts_the_lines_without_one(tmp_path: Path):
    process, bootstrap = serve()
    try:
        events = tmp_path / "notifications.jsonl"
        events.write_text("\n".join([
            json.dumps({"location_id": "C-1", "order_id": "n1", "ts": "2026-11-28T10:00:00Z"}),
            json.dumps({"location_id": "C-1", "order_id": "n2", "ts": 1_795_860_000_123}),
            json.dumps({"location_id": "C-1", "order_id": "n3"}),  # no time: stamped now, counted
        ]) + "\n")
        produced = subprocess.run([*CLI, "kafka", "produce", "--bootstrap-servers", bootstrap, "--topic", "timed",
                                   "--timestamp-field", "ts", str(events), "--json"],
                                  check=False, capture_output=True, text=True, timeout=60)
        assert produced.returncode == 0, produced.stderr
        report = json.loads(produced.stdout)
        assert (report["acknowledged"], report["stamped_now"]) == (3, 1)
        assert report["unstamped"] == ["line 3: 'ts' is missing (expected epoch milliseconds or ISO-8601 with a zone)"]
        stamps = {json.loads(m.value())["order_id"]: m.timestamp()[1] for m in consume(bootstrap, "timed")}
        assert (stamps["n1"], stamps["n2"]) == (1_795_860_000_000, 1_795_860_000_123)
        assert stamps["n3"] > 1_795_860_000_123  # now
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
