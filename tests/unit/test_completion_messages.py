"""Pure parts of completion tracking: the bitmap, ack parsing, the completion message, settings."""

from __future__ import annotations

import hashlib

import jsonschema
import pytest

from consolidator.rules.batch import (
    Member,
    ack_token,
    ack_token_matches,
    build_message,
    load_schema,
    schema_name,
)
from consolidator.rules.completion import (
    Ack,
    AckFormatError,
    acked_indexes,
    bit_count,
    build_completion,
    completion_id,
    empty_bitmap,
    load_completion_schema,
    parse_ack,
    set_bits,
)
from consolidator.rules.errors import ConfigurationError
from consolidator.rules.events import SourcePosition
from consolidator.rules.policy import FlushReason
from consolidator.settings import AckSettings, FlushSettings, load_settings

BATCH = "4f1c0d2b9a8e7f6a5b4c3d2e1f0a9b8c"
KEY = bytes(range(32))


def test_bitmap_sets_each_member_once():
    bits = empty_bitmap(11)
    assert len(bits) == 2 and bit_count(bits) == 0
    bits, newly = set_bits(bits, [0, 10, 10, 3])
    assert newly == 3 and bit_count(bits) == 3
    bits, newly = set_bits(bits, [3, 10])
    assert newly == 0 and acked_indexes(bits, 11) == [0, 3, 10]


def test_parse_ack_round_trips_and_names_what_is_wrong():
    ack = Ack(BATCH, members=(0, 2), item_ids=("A001",))
    assert parse_ack(ack.encode()) == ack
    for body, problem in (
        (b"{nope", "not JSON"),
        (b"[1]", "JSON object"),
        (b'{"batch_id": "x", "members": [0]}', "32 lowercase hex"),
        (f'{{"batch_id": "{BATCH}"}}'.encode(), "at least one member"),
        (f'{{"batch_id": "{BATCH}", "members": [-1]}}'.encode(), "indexes >= 0"),
        (f'{{"batch_id": "{BATCH}", "members": [true]}}'.encode(), "indexes >= 0"),
        (f'{{"batch_id": "{BATCH}", "item_ids": [""]}}'.encode(), "non-empty strings"),
        (f'{{"batch_id": "{BATCH}", "members": 0}}'.encode(), "must be lists"),
        (f'{{"batch_id": "{BATCH}", "members": [0], "extra": 1}}'.encode(), "unknown ack fields: 'extra'"),
        (f'{{"ack_version": 2, "batch_id": "{BATCH}", "members": [0]}}'.encode(), "ack_version"),
    ):
        with pytest.raises(AckFormatError, match=problem):
            parse_ack(body)


def test_completion_message_is_schema_valid_and_its_id_depends_on_the_batch_only():
    message = build_completion(BATCH, "WH-42", 3, 1_795_000_000_000, 1_795_000_060_123)
    jsonschema.Draft202012Validator(load_completion_schema(), format_checker=jsonschema.FormatChecker()).validate(message)
    assert message["completion_id"] == completion_id(BATCH) != completion_id("0" * 32)
    assert message["completed_at"] == "2026-11-18T11:07:40.123Z"  # date -u -d @1795000060


def test_a_tracked_batch_message_carries_item_ids_in_member_order():
    members = [Member(SourcePosition("orders", 0, offset), item, (("SKU-1", 1),), 0, 0)
               for offset, item in ((7, "B"), (3, "A"), (9, "A"))]
    plain = build_message("WH-1", members, FlushReason.IDLE, 0)
    tracked = build_message("WH-1", members, FlushReason.IDLE, 0, ack_key=KEY)
    jsonschema.Draft202012Validator(load_schema(schema_name(plain))).validate(plain)
    jsonschema.Draft202012Validator(load_schema(schema_name(tracked))).validate(tracked)
    assert (schema_name(plain), schema_name(tracked)) == ("1", "1.2")
    assert "completion_tracking" not in plain and tracked["completion_tracking"] is True
    assert [m["item_id"] for m in tracked["members"]] == ["A", "B", "A"]  # sorted by position
    assert [{k: v for k, v in m.items() if k != "item_id"} for m in tracked["members"]] == plain["members"]
    assert tracked["batch_id"] == plain["batch_id"]


def test_completion_settings(monkeypatch):
    for name in ("CONSOLIDATOR_COMPLETION_TRACKING", "CONSOLIDATOR_COMPLETION_SINK_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_URL", "mysql://root:@127.0.0.1:3306/x")
    monkeypatch.setenv("CONSOLIDATOR_DEAD_LETTER_URL", "file:///tmp/dlq.jsonl")
    monkeypatch.setenv("CONSOLIDATOR_REDIS_URL", "redis://localhost:6379/0")
    monkeypatch.setenv("CONSOLIDATOR_SINK_URL", "file:///tmp/out.jsonl")
    assert load_settings(FlushSettings).completion_tracking is False
    with pytest.raises(ConfigurationError, match="CONSOLIDATOR_COMPLETION_SINK_URL is required"):
        load_settings(AckSettings)
    monkeypatch.setenv("CONSOLIDATOR_COMPLETION_SINK_URL", "ftp://nope")
    monkeypatch.setenv("CONSOLIDATOR_COMPLETION_DEADLINE_SECONDS", "0")
    with pytest.raises(ConfigurationError) as error:
        load_settings(AckSettings)
    assert "CONSOLIDATOR_COMPLETION_SINK_URL" in str(error.value)
    assert "CONSOLIDATOR_COMPLETION_DEADLINE_SECONDS" in str(error.value)


def test_the_ack_token_is_an_hmac_of_the_batch_id_under_the_key_compared_in_constant_time():
    token = ack_token(KEY, BATCH)
    assert len(token) == 32 and int(token, 16) >= 0
    assert token == ack_token(KEY, BATCH)  # the same on every re-publish, in every engine
    assert token != ack_token(KEY, "0" * 32)  # another batch of the same key
    assert token != ack_token(bytes(32), BATCH)  # the same batch under another key
    assert token != hashlib.sha256(BATCH.encode()).hexdigest()[:32]  # not computable from the id
    assert ack_token_matches(KEY, BATCH, token)
    for forged in (None, "", token.upper(), token[:-1] + ("0" if token[-1] != "0" else "1"), "é" * 32, 7):
        assert not ack_token_matches(KEY, BATCH, forged)
    with pytest.raises(ValueError, match="16 bytes"):
        ack_token(b"short", BATCH)


def test_the_ack_carries_the_token_and_hides_it_from_reprs():
    ack = Ack(BATCH, members=(0,), token="f" * 32)
    assert parse_ack(ack.encode()) == ack and ack.as_dict()["ack_token"] == "f" * 32
    assert "f" * 32 not in repr(ack)


@pytest.mark.parametrize("held_back_ms", [0, 1_500])
def test_every_tracked_message_is_valid_against_the_schema_it_names(held_back_ms):
    """A tracked message names version 1.2 (``schema_minor`` 2), held back by a rate limit or
    not, and validates against it; a tracked message without its token does not. The tracking
    fields are a minor version: the version 1 and 1.1 schemas a consumer holds refuse them, so
    the message never names those."""
    members = [Member(SourcePosition("orders", 0, offset), f"O{offset}", (("SKU-1", 1),), 0, 0) for offset in range(3)]
    message = build_message("WH-1", members, FlushReason.IDLE, 0, ack_key=KEY, held_back_ms=held_back_ms)
    assert message["ack_token"] == ack_token(KEY, message["batch_id"])
    assert (message["schema_minor"], schema_name(message)) == (2, "1.2")
    for older in ("1", "1.1"):
        assert not jsonschema.Draft202012Validator(load_schema(older)).is_valid(message)
    validator = jsonschema.Draft202012Validator(load_schema(schema_name(message)))
    validator.validate(message)
    with pytest.raises(jsonschema.ValidationError, match="ack_token"):
        validator.validate({k: v for k, v in message.items() if k != "ack_token"})
