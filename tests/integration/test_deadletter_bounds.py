"""Every dead-letter entry fits its destination and is settled on its own.

SQS on moto accepts messages of any size, so the client here refuses what SQS refuses: a
SendMessageBatch call over 256 KiB (``BatchRequestTooLong``, the whole call fails)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from support import ROWS, STATE, record, sql
from test_flush import RecordingSink, ingest

from consolidator.rules.batch import Member
from consolidator.rules.deadletter import (
    dead_batch_entry,
    encode_entry,
    expired_entry,
    idempotency_key,
    poison_entry,
    rejected_entry,
)
from consolidator.rules.events import (
    FieldNames,
    KafkaRecord,
    PoisonEvent,
    PoisonReason,
    Rejected,
    SourcePosition,
)
from consolidator.rules.policy import Policy
from consolidator.services.flush import FlushService
from consolidator.services.ingest import IngestService
from consolidator.sinks.deadletter import FileDeadLetter, SqsDeadLetter

SQS_MAX = 256 * 1024
REGION = "eu-west-1"
MINUTE = 60_000
TTL = 3_600_000


class SqsLimits:
    """The boto3 SQS client, refusing a SendMessageBatch call over 256 KiB as SQS does."""

    def __init__(self, client) -> None:
        self.client, self.sent = client, []

    def send_message_batch(self, **kwargs):
        size = sum(len(e["MessageBody"].encode()) for e in kwargs["Entries"])
        if size > SQS_MAX:
            raise ClientError({"Error": {"Code": "AWS.SimpleQueueService.BatchRequestTooLong",
                                         "Message": f"{size} bytes"}}, "SendMessageBatch")
        self.sent.extend(json.loads(e["MessageBody"]) for e in kwargs["Entries"])
        return self.client.send_message_batch(**kwargs)


@pytest.fixture
def sqs_dead_letter(monkeypatch):
    for name, value in (("AWS_DEFAULT_REGION", REGION), ("AWS_ACCESS_KEY_ID", "testing"),
                        ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    with mock_aws():
        client = boto3.client("sqs", region_name=REGION)
        url = client.create_queue(QueueName="consolidator-dlq")["QueueUrl"]
        limits = SqsLimits(client)
        yield SqsDeadLetter(url, client=limits), limits


def test_a_poison_record_with_a_huge_detail_or_key_never_blocks_its_partition(store, clock, sqs_dead_letter):
    dead_letter, limits = sqs_dead_letter
    service = IngestService(store, dead_letter, FieldNames(), 256 * 1024, clock)
    quoted = json.dumps({"location_id": "W", "order_id": "A", "items": [{"sku": "S", "quantity": "9" * 120_000}]})
    records = [
        KafkaRecord("orders", 0, 0, clock.now_ms(), b"k", quoted.encode()),  # the detail quotes 120 KB
        KafkaRecord("orders", 0, 1, clock.now_ms(), b"K" * 200_000, b"not json"),  # a 200 KB key
        record(2, order="VALID"),  # behind them in the same partition
    ]
    result = service.ingest(records)
    assert not result.failed
    assert [r["item_id"] for r in sql(store, "SELECT item_id FROM buffer_rows")] == ["VALID"]
    detail, key = limits.sent
    # the reason quotes a bounded piece of the 120 KB value (consolidator.rules.printable.echoed)
    assert detail["reason"] == "bad_quantity" and "(120,000 characters)" in detail["detail"]
    assert len(detail["detail"]) < 200 and not detail.get("detail_truncated")
    assert key["key_truncated"] and key["key_bytes"] == 200_000 and key["idempotency_key"] == "poison:orders:0:1"


def test_an_expired_250_kb_event_is_dead_lettered_and_marked(store, clock, sqs_dead_letter, tmp_path):
    dead_letter, limits = sqs_dead_letter
    now = clock.now_ms()
    items = [(f"S{i:04d}", i) for i in range(7_600)]
    value = json.dumps({"location_id": "WH-42", "order_id": "BIG",
                        "items": [{"sku": s, "quantity": q} for s, q in items]}, separators=(",", ":"))
    big = record(0, value.encode(), timestamp_ms=now - TTL - 1)
    assert 240_000 < len(big.value) < 256 * 1024  # a valid event
    ingested = ingest(store, clock, [big, record(1, order="SMALL", timestamp_ms=now - TTL - 1)])
    assert ingested == 2
    policy = Policy(debounce_ms=MINUTE, hard_window_ms=10 * MINUTE, max_batch_size=10, tick_interval_ms=30_000,
                    ttl_ms=TTL)
    service = FlushService(store=store, sink=RecordingSink(tmp_path / "out.jsonl"), dead_letter=dead_letter,
                           policy=policy, clock=clock, max_rows_per_tick=1_000)
    clock.advance(MINUTE)
    assert service.tick().expired == 2
    assert store.row_counts() == {"EXPIRED": 2}
    entry = next(e for e in limits.sent if e["item_id"] == "BIG")
    assert entry["items_truncated"] and entry["item_count"] == 7_600 and 0 < len(entry["items"]) < 7_600
    assert entry["items"] == [{"sku": s, "quantity": q} for s, q in items[:len(entry["items"])]]
    assert entry["idempotency_key"] == "expired:orders:0:0"
    assert service.tick().expired == 0 and len(limits.sent) == 2  # nothing re-sent


class RefusingDeadLetter(FileDeadLetter):
    """The real file destination, refusing the entries of one item while ``refuse`` is set."""

    def __init__(self, path: Path, refuse: str) -> None:
        super().__init__(path)
        self.refuse: str | None = refuse
        self.attempts: list[str] = []

    def send(self, entries: Sequence[dict]) -> set[int]:
        self.attempts += [e["item_id"] for e in entries]
        refused = {i for i, e in enumerate(entries) if e.get("item_id") == self.refuse}
        kept = [e for i, e in enumerate(entries) if i not in refused]
        failed = super().send(kept)
        assert not failed
        return refused


def test_one_refused_expired_entry_does_not_hold_its_neighbours(store, clock, tmp_path):
    now = clock.now_ms()
    ingest(store, clock, [record(i, order=f"OLD{i}", timestamp_ms=now - TTL - 1) for i in range(4)])
    dead = RefusingDeadLetter(tmp_path / "dead.jsonl", refuse="OLD2")
    policy = Policy(debounce_ms=MINUTE, hard_window_ms=10 * MINUTE, max_batch_size=10, tick_interval_ms=30_000,
                    ttl_ms=TTL)
    service = FlushService(store=store, sink=RecordingSink(tmp_path / "out.jsonl"), dead_letter=dead,
                           policy=policy, clock=clock, max_rows_per_tick=1_000)
    clock.advance(MINUTE)
    assert service.tick().expired == 3
    states = {r["item_id"]: r["status"] for r in sql(store, f"SELECT r.item_id, {STATE} AS status FROM {ROWS}")}
    assert states == {"OLD0": "EXPIRED", "OLD1": "EXPIRED", "OLD2": "CLAIMED", "OLD3": "EXPIRED"}
    clock.advance(30_000)
    assert service.tick().expired == 0 and dead.attempts.count("OLD0") == 1  # neighbours never re-sent
    dead.refuse = None
    clock.advance(30_000)
    assert service.tick().expired == 1
    assert store.row_counts() == {"EXPIRED": 4} and store.batch_counts() == {"EXPIRED": 1}
    assert sorted(e["item_id"] for e in dead.read()) == ["OLD0", "OLD1", "OLD2", "OLD3"]


def test_every_entry_kind_carries_its_own_idempotency_key():
    member = Member(SourcePosition("orders", 3, 9), "A", (("S", 1),), 0, 0, 1, 0)
    expired = expired_entry("WH-1", member, 10, 10)
    assert expired["idempotency_key"] == "expired:orders:3:9" == idempotency_key(expired)
    legacy = {k: v for k, v in expired.items() if k != "idempotency_key"}  # written before the key existed
    assert idempotency_key(legacy) == "expired:orders:3:9"
    unidentified = rejected_entry(Rejected(PoisonReason.UNIDENTIFIABLE, "no offset", {"x": 1}), 0)
    assert unidentified["idempotency_key"].startswith("poison:unidentifiable:")
    assert dead_batch_entry({"batch_id": "b" * 32}, 3, "err", 0)["idempotency_key"] == "dead_batch:" + "b" * 32


def test_every_field_of_every_kind_is_bounded_with_a_flag():
    huge = "é" * 300_000
    poison = poison_entry(KafkaRecord("orders", 0, 5, 0, b"k" * 300_000, b"v" * 300_000),
                          PoisonEvent(PoisonReason.NOT_JSON, huge), 0)
    rejected = rejected_entry(Rejected(PoisonReason.BAD_ENVELOPE, huge, {"value": "A" * 400_000},
                                       SourcePosition("orders", 0, 6), partition_key=huge, key_b64="QQ" * 200_000,
                                       value_b64="QQ" * 200_000), 0)
    dead = dead_batch_entry({"batch_id": "c" * 32, "item_ids": ["x" * 191] * 2_000,
                             "members": [{"topic": "t" * 249, "partition": 0, "offset": i} for i in range(2_000)]},
                            5, huge, 0)
    member = Member(SourcePosition("orders", 0, 7), "I", tuple((f"S{i}", i) for i in range(20_000)), 0, 0, 1, 0)
    for entry in (poison, rejected, dead, expired_entry("W", member, 0, 0)):
        body = encode_entry(entry, SQS_MAX)
        assert len(body.encode()) <= SQS_MAX
        decoded = json.loads(body)
        assert decoded["idempotency_key"] == entry["idempotency_key"]
        assert any(k.endswith("_truncated") and v is True for k, v in decoded.items()), sorted(decoded)
    assert poison["detail_truncated"] and poison["key_truncated"] and poison["value_truncated"]
    assert rejected["partition_key_truncated"] and rejected["value_truncated"] and rejected["envelope_truncated"]
    assert dead["detail_truncated"] and len(dead["detail"]) == 2_048
