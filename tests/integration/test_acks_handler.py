"""The real acks handler, loaded from functions/acks: acks sent by the client helper to an SQS
queue (moto), received, and handed to the handler as the SQS event Lambda would build; the
completion goes to another queue."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import boto3
import pytest
from moto import mock_aws
from support import T0, sql

from consolidator.consumer.acks import AckClient
from consolidator.demo.lambda_context import LocalLambdaContext
from consolidator.rules.batch import ack_token
from consolidator.rules.completion import Ack, completion_id
from consolidator.store.completion import SealedBatch

ROOT = Path(__file__).resolve().parents[2]
REGION = "eu-west-1"
BATCH = "4f1c0d2b9a8e7f6a5b4c3d2e1f0a9b8c"  # the batch of events/sqs-acks.json
SAMPLE_KEY = bytes(range(32))  # events/sqs-acks.json's tokens are made with this ack key


def load_handler():
    spec = importlib.util.spec_from_file_location("acks_handler_under_test", ROOT / "functions/acks/handler.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def sqs(monkeypatch, database_url):
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_URL", database_url)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Consolidator")
    with mock_aws():
        client = boto3.client("sqs", region_name=REGION)
        completions = client.create_queue(QueueName="completions")["QueueUrl"]
        monkeypatch.setenv("CONSOLIDATOR_COMPLETION_SINK_URL", "sqs://" + completions.removeprefix("https://"))
        yield client, completions


def lambda_event(messages: list[dict]) -> dict:
    """The SQS event Lambda builds from received messages."""
    return {"Records": [{
        "messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"],
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": str(T0)}, "messageAttributes": {},
        "md5OfBody": m["MD5OfBody"], "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:{REGION}:123456789012:acks", "awsRegion": REGION,
    } for m in messages]}


def received(client, url: str) -> list[dict]:
    out = []
    while batch := client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages"):
        out.extend(batch)
    return out


def sealed_message(store, clock, group_key: str, batch_id: str, items: tuple[str, ...]) -> dict:
    """What a consumer received: a tracked batch message (the fields acks use), sealed."""
    store.seal([SealedBatch(batch_id, group_key, items)], clock.now_ms())
    return {"batch_id": batch_id, "group_key": group_key, "completion_tracking": True,
            "ack_token": ack_token(store.ack_key(), batch_id),
            "members": [{"item_id": item} for item in items]}


def test_handler_retries_nothing_it_refused_and_publishes_the_completion(sqs, store, clock):
    client, completions = sqs
    message = sealed_message(store, clock, "WH-7", BATCH, ("A001", "A002", "A003"))
    acks_url = client.create_queue(QueueName="acks")["QueueUrl"]
    sender = AckClient(acks_url, client=client)
    sender.ack(message, members=[0])
    sender.ack(dict(message, batch_id="0" * 32), members=[0])  # unknown batch, and not its token
    sender.ack(message, item_ids=["A002", "nope"])  # one unknown item: A002 applies, the rest refused
    client.send_message(QueueUrl=acks_url, MessageBody="{not json")
    sender.ack(message, members=[0, 2])  # a duplicate and the last member
    messages = received(client, acks_url)
    assert len(messages) == 5

    response = load_handler().handler(lambda_event(messages), LocalLambdaContext(function_name="acks"))

    assert response["batchItemFailures"] == []  # refused acks are final: counted once, never retried
    (completion,) = [json.loads(m["Body"]) for m in received(client, completions)]
    assert completion["batch_id"] == BATCH and completion["completion_id"] == completion_id(BATCH)
    assert store.tracker(BATCH).outbox == "PUBLISHED"


def test_a_sender_posing_as_another_tenant_cannot_complete_its_batch(sqs, store, clock, capsys):
    """Batch ids are computable; the token is not: the forged acks are refused, counted once
    (AcksRefused in the handler's metrics) and consumed, the batch stays open."""
    client, completions = sqs
    victim = sealed_message(store, clock, "tenant-1", BATCH, ("A001", "A002"))
    mine = sealed_message(store, clock, "tenant-2", "1" * 32, ("B001",))
    acks_url = client.create_queue(QueueName="acks")["QueueUrl"]
    sender = AckClient(acks_url, client=client)
    sender.send([Ack(BATCH, members=(0, 1), token=mine["ack_token"])])  # my token, its batch id
    client.send_message(QueueUrl=acks_url, MessageBody=json.dumps({"batch_id": BATCH, "members": [0, 1]}))
    response = load_handler().handler(lambda_event(received(client, acks_url)),
                                      LocalLambdaContext(function_name="acks"))
    assert response["batchItemFailures"] == []
    assert store.acked_members(BATCH) == [] and received(client, completions) == []
    (emf,) = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    refused = emf["AcksRefused"]
    assert sum(refused if isinstance(refused, list) else [refused]) == 2  # each forged ack once
    sender.ack(victim, members=[0, 1])
    load_handler().handler(lambda_event(received(client, acks_url)), LocalLambdaContext(function_name="acks"))
    assert store.tracker(BATCH).complete


def test_handler_on_the_sam_sample_event_and_the_schedule(sqs, store, clock):
    client, completions = sqs
    store.seal([SealedBatch(BATCH, "WH-7", ("A001", "A002", "A003"))], clock.now_ms())
    sql(store, "UPDATE completion_keys SET ack_key = %s", (SAMPLE_KEY,))  # the key the sample was made with
    handler = load_handler()
    event = json.loads((ROOT / "events/sqs-acks.json").read_text())
    assert all(json.loads(r["body"])["ack_token"] == ack_token(SAMPLE_KEY, BATCH) for r in event["Records"])
    response = handler.handler(event, LocalLambdaContext(function_name="acks"))
    assert response == {"batchItemFailures": []}  # the third ack (member 42) is refused, not retried
    assert store.tracker(BATCH).complete
    assert len(received(client, completions)) == 1
    schedule = json.loads((ROOT / "events/scheduled-acks-sweep.json").read_text())
    report = handler.handler(schedule, LocalLambdaContext(function_name="acks"))
    assert report == {"republished": 0, "publish_failures": 0, "incomplete": 0, "oldest_incomplete_age_ms": None}


def test_ack_client_refuses_malformed_acks_before_sending():
    with pytest.raises(ValueError, match="batch_id"):
        Ack("not-an-id", members=(0,))
    with pytest.raises(ValueError, match="at least one member"):
        Ack("a" * 32)
    with pytest.raises(ValueError, match="indexes >= 0"):
        Ack("a" * 32, members=(-1,))
    with pytest.raises(ValueError, match="not tracked"):
        AckClient("https://sqs.eu-west-1.amazonaws.com/123456789012/acks", client=object()).ack(
            {"batch_id": "a" * 32}, members=[0])
