"""Every group key ingest can store is accepted by the SQS sink.

moto does not enforce SQS's character rules, so every message the sink sends is checked against
them with the sink's own statement of the rules (``consolidator.sinks.sqs_text``), which is
itself checked here against the documented character set."""

from __future__ import annotations

import base64
import hashlib
import json

import boto3
import pytest
from moto import mock_aws

from consolidator.rules.events import MAX_KEY_CHARS, FieldNames, KafkaRecord, decode
from consolidator.sinks import OutgoingBatch
from consolidator.sinks.sqs import SqsSink
from consolidator.sinks.sqs_text import is_group_id, is_sqs_text

REGION = "us-east-1"

# Stored by ingest (1 to 191 characters, anything JSON can hold), refused by SQS when raw.
HOSTILE_KEYS = [
    "WH\x01ctl",  # a control character
    "tab\there",  # allowed in an attribute, not in a group id
    "nonchar\uffff",  # U+FFFF: outside the XML character set
    "x" * 129,  # over the group id's 128 characters
    "é" * MAX_KEY_CHARS,  # the longest key: 382 UTF-8 bytes
    "\x00" * MAX_KEY_CHARS,  # the longest key of the worst characters
    "emoji \U0001f600",  # fine in an attribute, not in a group id
    "WH-1",  # an ordinary key: sent as it is
]


def test_the_rules_are_the_documented_character_sets():
    allowed = ["\t", "\n", "\r", " ", "\ud7ff", "\ue000", "\ufffd", "\U00010000", "\U0010ffff", "abc"]
    refused = ["\x00", "\x08", "\x0b", "\x1f", "\ufffe", "\uffff", "\ud800"]
    assert all(is_sqs_text(c) for c in allowed)
    assert not any(is_sqs_text(c) for c in refused)
    punctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
    assert is_group_id("aZ09" + punctuation) and is_group_id("a" * 128)
    assert not any(is_group_id(k) for k in ("", "a" * 129, "a b", "é", "a\tb", "\U0001f600"))


def test_ingest_stores_the_hostile_keys():
    """The keys above are valid events today: a sink must cope with them, not ingest refuse them."""
    for key in HOSTILE_KEYS:
        value = json.dumps({"location_id": key, "order_id": "o1", "items": []}).encode()
        assert decode(KafkaRecord("t", 0, 0, 0, None, value), FieldNames(), 262_144).group_key == key


class Recorder:
    """The boto3 client, recording every entry the sink sends."""

    def __init__(self, client) -> None:
        self.client, self.sent = client, []

    def send_message_batch(self, **kwargs):
        self.sent.extend(kwargs["Entries"])
        return self.client.send_message_batch(**kwargs)


@pytest.fixture
def sqs(monkeypatch):
    for name, value in (("AWS_DEFAULT_REGION", REGION), ("AWS_ACCESS_KEY_ID", "testing"),
                        ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield boto3.client("sqs", region_name=REGION)


def decoded_key(attributes: dict) -> str:
    value = attributes["group_key"]["StringValue"]
    encoding = attributes.get("group_key_encoding", {}).get("StringValue")
    assert encoding in (None, "base64")
    return value if encoding is None else base64.b64decode(value).decode()


@pytest.mark.parametrize("fifo", [False, True])
def test_every_stored_key_is_sent_within_the_sqs_rules(sqs, fifo):
    name = "batches.fifo" if fifo else "batches"
    url = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true"} if fifo else {})["QueueUrl"]
    recorder = Recorder(sqs)
    sink = SqsSink(url, client=recorder)
    batches = [OutgoingBatch(f"{i:032x}", key, json.dumps({"group_key": key}, ensure_ascii=False).encode())
               for i, key in enumerate(HOSTILE_KEYS)]
    assert sink.publish(batches) == {}
    assert len(recorder.sent) == len(HOSTILE_KEYS)
    for batch, entry in zip(batches, recorder.sent, strict=True):
        assert is_sqs_text(entry["MessageBody"]), entry["MessageBody"]
        assert json.loads(entry["MessageBody"]) == {"group_key": batch.group_key}  # the same JSON value
        attributes = entry["MessageAttributes"]
        assert all(is_sqs_text(a["StringValue"]) for a in attributes.values()), attributes
        assert decoded_key(attributes) == batch.group_key
        assert sink.message_bytes(entry) <= 256 * 1024
        if fifo:
            group = entry["MessageGroupId"]
            assert is_group_id(group) and is_group_id(entry["MessageDeduplicationId"]), group
            if group != batch.group_key:
                assert attributes["group_id_encoding"]["StringValue"] == "sha256"
                assert group == "sha256:" + hashlib.sha256(batch.group_key.encode()).hexdigest()
    plain = recorder.sent[HOSTILE_KEYS.index("WH-1")]
    assert plain["MessageAttributes"]["group_key"]["StringValue"] == "WH-1"
    assert set(plain["MessageAttributes"]) == {"batch_id", "group_key"}  # nothing new for an ordinary key
    if fifo:
        assert plain["MessageGroupId"] == "WH-1"
