"""Producer text never controls the operator's terminal: group keys, item ids, skus and every other
value a producer chose are printed as text by every command (no rich markup, no emoji codes,
control and bidirectional characters escaped visibly), through the real CLI."""

from __future__ import annotations

import json
import time

from test_cli import cli, cli_json, env, flush_env, migrated  # noqa: F401 (fixtures)

MARKUP_KEY = "[/]"  # rich's closing tag without an opening one: a MarkupError when read as markup
LINK_ITEM = "[link=https://evil.example]click[/link]"  # a hyperlink when read as markup
CONTROL_KEY = "WH\x1b]0;owned\x07\x1b[2J"  # sets the terminal title, then clears the screen
BIDI_ITEM = "o\u202eevil\x9b:x:"  # right-to-left override, a C1 control (CSI) and an emoji code
RAW = ("\x1b", "\x07", "\x9b", "\u202e")  # none of these may reach the terminal
INT64 = 2**63 - 1


def assert_printed_as_text(text: str) -> None:
    assert not [c for c in RAW if c in text], ascii(text)


def hostile_file(tmp_path):
    path = tmp_path / "hostile.jsonl"
    lines = [
        {"location_id": MARKUP_KEY, "order_id": LINK_ITEM, "items": [{"sku": "S", "quantity": 1}]},
        {"location_id": CONTROL_KEY, "order_id": BIDI_ITEM, "items": [{"sku": ":smile:", "quantity": 2}]},
        # poison whose reason quotes the producer's sku
        {"location_id": MARKUP_KEY, "order_id": "p", "items": [{"sku": MARKUP_KEY + "\x1b[2J", "quantity": INT64},
                                                               {"sku": MARKUP_KEY + "\x1b[2J", "quantity": INT64}]},
    ]
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return path


def test_group_keys_item_ids_and_poison_details_are_printed_as_text(flush_env, migrated, tmp_path):  # noqa: F811
    run = flush_env | {"CONSOLIDATOR_DEBOUNCE_SECONDS": "0.001"}

    ingested = cli(run, "ingest", "--file", str(hostile_file(tmp_path)))
    assert ingested.exit_code == 0, ingested.output
    assert "[/]\\x1b[2J" in ingested.stdout and "2 stored" in ingested.stdout
    assert_printed_as_text(ingested.output)

    time.sleep(0.01)
    flushed = cli(run, "flush", "--once")
    assert flushed.exit_code == 0, flushed.output
    assert "group=[/] " in flushed.stdout and "group=WH\\x1b]0;owned\\x07\\x1b[2J " in flushed.stdout
    assert_printed_as_text(flushed.output)

    listed = cli(run, "batch", "list")
    assert listed.exit_code == 0, listed.output
    assert "[/]" in listed.stdout and "WH\\x1b]0;owned\\x07\\x1b[2J" in listed.stdout
    assert_printed_as_text(listed.output)

    batches = {b["group_key"]: b["batch_id"] for b in cli_json(run, "batch", "list")["batches"]}
    shown = cli(run, "batch", "show", batches[MARKUP_KEY])
    assert shown.exit_code == 0, shown.output
    assert f"({MARKUP_KEY})" in shown.stdout and LINK_ITEM in shown.stdout
    shown = cli(run, "batch", "show", batches[CONTROL_KEY])
    assert shown.exit_code == 0, shown.output
    assert "o\\u202eevil\\x9b:x:" in shown.stdout and ":smile:" in shown.stdout
    assert_printed_as_text(shown.output)

    dead = cli(run, "dlq", "list")
    assert dead.exit_code == 0, dead.output
    assert "[/]\\x1b[2J" in dead.stdout
    assert_printed_as_text(dead.output)
