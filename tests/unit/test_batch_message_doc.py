"""The message example of docs/reference/batch-message.md is a message the code would publish:
it validates against the shipped schema and its ``batch_id`` follows the id rule."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema

from consolidator.rules.batch import batch_id, load_schema
from consolidator.rules.events import SourcePosition

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "batch-message.md"


def example() -> dict:
    block = re.search(r"```json\n(\{\n  \"schema_version\": 1,.*?\n\})\n```", PAGE.read_text(), re.DOTALL)
    assert block, f"{PAGE} has no version 1 message example"
    return json.loads(block.group(1))


def test_the_documented_message_validates_and_its_id_follows_the_rule() -> None:
    message = example()
    jsonschema.validate(message, load_schema())
    positions = [SourcePosition(m["topic"], m["partition"], m["offset"]) for m in message["members"]]
    assert message["batch_id"] == batch_id(message["group_key"], positions)
