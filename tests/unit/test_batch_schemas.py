"""A shipped message schema never changes: a consumer validates against its own copy of the
schema its messages name (``schema_name``), so a new field is a new minor version
(``schema_minor``), never an edit of a schema already shipped. Each schema's content is pinned
here as first shipped; a new version adds a file and a line."""

from __future__ import annotations

import hashlib
import json
from importlib import resources

import jsonschema
import pytest

from consolidator.rules.batch import Member, build_message, load_schema, schema_name
from consolidator.rules.events import SourcePosition
from consolidator.rules.policy import FlushReason
from consolidator.rules.shape import EventView, Shape, parse_outputs
from consolidator.rules.tracecontext import TraceContext

SHIPPED = {  # sha256 of each schema's JSON, keys sorted, without whitespace
    "batch-v1.schema.json": "e6aa7977f86dc2b5c0bc6aa68e79369e0c20f65e9c2bc03d29e15f136b53c0b4",
    "batch-v1.1.schema.json": "0e07b70a9f5058dbad93c5b7d44826791786a55f98bb1f142ee41a46230d1ebb",
    "batch-v1.2.schema.json": "646bd048b8237bcdd5404eed448ea02b50721c2629c07b455e36263bbc231ab3",
    "batch-v1.3.schema.json": "152258f3ae7163f8596ce31e60aaa4c160a1454afa7f6c9f49590a35a25f1f73",
    "batch-v2.schema.json": "57fb212cb61bf310451f4a2939cdcc74a5cad67c8823b1640056f451f359eb4c",
    "batch-v2.1.schema.json": "6722b1aa98635a2b05de2c03855cc50cf00c991d09b0083ede7082ba9ebc1a84",
    "completion-v1.schema.json": "803549197cac734d791aadacfb4b6b5db15c36584a0362b7fc055cbb3e4eaf7a",
}


def _content_hash(name: str) -> str:
    schema = json.loads(resources.files("consolidator.schemas").joinpath(name).read_text())
    return hashlib.sha256(json.dumps(schema, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def test_every_shipped_schema_is_pinned_and_unchanged():
    shipped = sorted(p.name for p in resources.files("consolidator.schemas").iterdir() if p.name.endswith(".json"))
    assert shipped == sorted(SHIPPED)
    assert {name: _content_hash(name) for name in shipped} == SHIPPED


TRACED = (None, TraceContext(f"00-{'a' * 32}-{'1' * 16}-01"))  # members' contexts: the second has one


@pytest.mark.parametrize(("held_back_ms", "tracked", "traced", "name"), [
    (0, False, False, "1"), (1_500, False, False, "1.1"), (0, True, False, "1.2"), (1_500, True, False, "1.2"),
    (0, False, True, "1.3"), (1_500, False, True, "1.3"), (0, True, True, "1.3"), (1_500, True, True, "1.3")])
def test_a_message_names_the_oldest_version_that_holds_its_fields(held_back_ms, tracked, traced, name):
    """Each message validates against the version it names, and against every later minor
    version; an earlier one refuses it (its fields are unknown there)."""
    members = [Member(SourcePosition("orders", 0, offset), f"O{offset}", (("SKU-1", 1),), 0, 0) for offset in range(2)]
    message = build_message("WH-1", members, FlushReason.IDLE, 0, held_back_ms=held_back_ms,
                            ack_key=b"k" * 16 if tracked else None, trace_contexts=TRACED if traced else ())
    assert schema_name(message) == name
    assert ("traceparent" in message) is traced
    for version in ("1", "1.1", "1.2", "1.3"):
        valid = jsonschema.Draft202012Validator(load_schema(version)).is_valid(message)
        assert valid is (version >= name), version


@pytest.mark.parametrize(("traced", "name"), [(False, "2"), (True, "2.1")])
def test_a_shaped_message_with_a_traceparent_names_version_2_1(traced, name):
    shape = Shape(parse_outputs('[{"name": "n", "op": "count"}]'), True)
    members = [Member(SourcePosition("orders", 0, offset), f"O{offset}", EventView({"n": offset}), 0, 0)
               for offset in range(2)]
    message = build_message("WH-1", members, FlushReason.IDLE, 0, shape=shape, trace_contexts=TRACED if traced else ())
    assert schema_name(message) == name
    for version in ("2", "2.1"):
        valid = jsonschema.Draft202012Validator(load_schema(version)).is_valid(message)
        assert valid is (version >= name), version
