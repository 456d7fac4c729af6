"""Batches built by the Spark streaming job join completion tracking: the executor-side writer
seals each batch in the trackers' database before it publishes it (no Spark needed here: the
writer's per-partition function runs as an executor would run it)."""

from __future__ import annotations

import json

import pytest
from support import T0, record

from consolidator.rules.batch import Member, build_message, encode
from consolidator.rules.completion import Ack
from consolidator.rules.errors import DeliveryError
from consolidator.rules.events import FieldNames, decode
from consolidator.rules.policy import FlushReason
from consolidator.services.acks import AckService
from consolidator.sinks import sink_from_url
from consolidator.spark.delivery import BATCH, close_destinations, deliver_partition


def tracked_message(group: str, offsets: range) -> dict:
    events = [decode(record(o, location=group, order=f"O{o}"), FieldNames(), 1 << 20) for o in offsets]
    members = [Member(e.position, e.item_id, e.items, T0, T0) for e in events]
    return build_message(group, members, FlushReason.IDLE, T0, ack_key=bytes(range(32)))


def rows(*messages: dict) -> list[dict]:
    return [{"kind": BATCH, "group_key": m["group_key"], "batch_id": m["batch_id"], "reason": "idle",
             "body": encode(m).decode()} for m in messages]


def test_the_writer_seals_each_batch_before_publishing_and_acks_complete_it(store, database_url, tmp_path, clock):
    first, second = tracked_message("WH-1", range(3)), tracked_message("WH-2", range(3, 5))
    out = tmp_path / "batches.jsonl"
    try:
        deliver_partition(rows(first, second), sink_url=f"file://{out}", dead_letter_url=f"file://{tmp_path}/dl.jsonl",
                          epoch_id=7, tracking_database_url=database_url)
    finally:
        close_destinations()
    assert [json.loads(line)["batch_id"] for line in out.read_text().splitlines()] == [first["batch_id"],
                                                                                      second["batch_id"]]
    assert (store.tracker(first["batch_id"]).member_count, store.tracker(second["batch_id"]).member_count) == (3, 2)

    completions = tmp_path / "completions.jsonl"
    service = AckService(store, sink_from_url(f"file://{completions}"), clock, lease_ms=60_000)
    service.ack([Ack(second["batch_id"], members=(1, 0))])
    assert [json.loads(line)["batch_id"] for line in completions.read_text().splitlines()] == [second["batch_id"]]


def test_a_tracker_database_that_is_down_fails_the_partition_before_anything_is_published(tmp_path):
    message = tracked_message("WH-1", range(2))
    out = tmp_path / "batches.jsonl"
    with pytest.raises(DeliveryError, match="not sealed"):
        try:
            deliver_partition(rows(message), sink_url=f"file://{out}", dead_letter_url=f"file://{tmp_path}/dl.jsonl",
                              epoch_id=8, tracking_database_url="mysql://root:@127.0.0.1:1/nowhere")
        finally:
            close_destinations()
    assert not out.exists(), "an unsealed batch must not reach the sink"


def test_the_writer_seals_with_the_database_secret_instead_of_a_password_in_a_url(store, database_url, tmp_path,
                                                                                 monkeypatch):
    """``--completion-database-secret-arn``: the executor reads user and password from Secrets
    Manager; the URL, if any, gives only the location (no credentials in the job's arguments)."""
    import boto3
    from moto import mock_aws

    from consolidator.store.connection import ConnectionParams

    params = ConnectionParams.from_url(database_url)
    location = f"mysql://{params.host}:{params.port}/{params.database}"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    message = tracked_message("WH-1", range(2))
    with mock_aws():
        arn = boto3.client("secretsmanager", region_name="eu-west-1").create_secret(
            Name="trackers", SecretString=json.dumps({"host": "unused", "username": params.user,
                                                      "password": params.password}))["ARN"]
        try:
            deliver_partition(rows(message), sink_url=f"file://{tmp_path}/out.jsonl",
                              dead_letter_url=f"file://{tmp_path}/dl.jsonl", epoch_id=9,
                              tracking_database_url=location, tracking_database_secret_arn=arn)
        finally:
            close_destinations()
    assert store.tracker(message["batch_id"]).member_count == 2
