"""``consolidator ingest --file`` at its edges: nothing is skipped silently (blank lines counted,
a file that was all replays says so, a value that is not an object is poison with or without
--timestamp-field), JSON nested too deeply is a bad line rather than a traceback, and a topic
option is a Kafka topic name. Through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli import cli, cli_json, env, migrated  # noqa: F401 (fixtures)

DEEP = "[" * 100_000 + "]" * 100_000  # far past any JSON parser's recursion limit


def value(location: str, order: str, **extra) -> str:
    return json.dumps({"location_id": location, "order_id": order, "items": [{"sku": "S", "quantity": 1}], **extra})


def dead_letter(values: dict[str, str]) -> list[dict]:
    path = Path(values["CONSOLIDATOR_DEAD_LETTER_URL"].removeprefix("file://"))
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("flag", [(), ("--timestamp-field", "ts")], ids=["plain", "timestamp-field"])
def test_a_value_that_is_not_an_object_is_poison_with_or_without_timestamp_field(env, migrated, tmp_path, flag):  # noqa: F811
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join([value("WH-1", "A1", ts=1_795_000_000_000), "{not json", "[1, 2]", "42",
                               value("WH-1", "A2", ts=1_795_000_000_000)]) + "\n")
    report = cli_json(env, "ingest", "--file", str(path), *flag)
    assert (report["stored"], report["poison"], report["malformed"]) == (2, 3, [])
    assert [(p["line"], p["reason"]) for p in report["poison_lines"]] == [(2, "not_json"), (3, "not_object"),
                                                                         (4, "not_object")]
    assert [e["reason"] for e in dead_letter(env)] == ["not_json", "not_object", "not_object"]
    again = cli(env, "ingest", "--file", str(path), *flag)
    assert again.exit_code == 0, again.output  # a rerun is a replay, not a failure


def test_blank_lines_are_counted_so_every_line_is_accounted_for(env, migrated, tmp_path):  # noqa: F811
    path = tmp_path / "gaps.jsonl"
    path.write_text(value("WH-1", "A1") + "\n\n   \n" + value("WH-1", "A2") + "\n\n")
    report = cli_json(env, "ingest", "--file", str(path))
    assert (report["lines"], report["blank"], report["stored"]) == (5, 3, 2)
    human = cli(env, "ingest", "--file", str(path))
    assert "5 lines, 0 stored, 0 coalesced, 2 replayed, 0 poison, 0 malformed, 0 failed, 3 blank" in human.stdout


def test_a_file_that_was_all_replays_says_so_and_names_the_fix(env, migrated, tmp_path):  # noqa: F811
    first, second = tmp_path / "a" / "events.jsonl", tmp_path / "b" / "events.jsonl"
    for path, group in ((first, "WH-1"), (second, "WH-2")):
        path.parent.mkdir()
        path.write_text(value(group, "A1") + "\n" + value(group, "A2") + "\n")
    assert cli_json(env, "ingest", "--file", str(first))["replay_only"] is False
    other = cli(env, "ingest", "--file", str(second))  # same name: same topic, same offsets
    assert other.exit_code == 0, other.output
    assert "nothing new: every line of" in other.stderr and "--topic NAME" in other.stderr
    assert "file.events" in other.stderr
    own = cli_json(env, "ingest", "--file", str(second), "--topic", "file.events-b")
    assert (own["stored"], own["replay_only"]) == (2, False)


def test_json_nested_too_deeply_is_a_bad_line_not_a_traceback(env, migrated, tmp_path):  # noqa: F811
    values = tmp_path / "deep.jsonl"
    values.write_text(DEEP + "\n" + value("WH-1", "A1") + "\n")  # the first line decides the format
    for flag in ((), ("--timestamp-field", "ts")):
        result = cli(env, "ingest", "--file", str(values), "--json", *flag)
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        report = json.loads(result.stdout)
        assert report["format"] == "values" and [p["line"] for p in report["poison_lines"]][:1] in ([1], [])
    assert [e["reason"] for e in dead_letter(env)] == ["not_json"]

    envelopes = tmp_path / "records.jsonl"
    good = {"topic": "orders", "partition": 0, "offset": 1, "timestamp": 1_795_000_000_000,
            "value": value("WH-1", "B1")}
    envelopes.write_text(json.dumps(good) + "\n" + DEEP + "\n")
    result = cli(env, "ingest", "--file", str(envelopes), "--json")
    assert result.exit_code == 1 and "Traceback" not in result.output and "RecursionError" not in result.output
    report = json.loads(result.stdout)
    assert [m["line"] for m in report["malformed"]] == [2] and "nested too deeply" in report["malformed"][0]["detail"]

    redrive = cli(env, "dlq", "redrive", "--file", str(values))
    assert redrive.exit_code == 2 and "not JSON lines" in redrive.stderr and "Traceback" not in redrive.output


@pytest.mark.parametrize("topic", [".", "..", "has space", "a" * 250, "semi;colon", "tab\tx"])
@pytest.mark.parametrize("command", [("ingest", "--file", "{file}", "--topic"), ("offsets", "list", "--topic"),
                                     ("offsets", "reset", "--yes"),
                                     ("kafka", "produce", "--bootstrap-servers", "127.0.0.1:1", "{file}", "--topic")],
                         ids=["ingest", "offsets list", "offsets reset", "kafka produce"])
def test_a_topic_option_is_a_kafka_topic_name(env, migrated, tmp_path, command, topic):  # noqa: F811
    path = tmp_path / "one.jsonl"
    path.write_text(value("WH-1", "A1") + "\n")
    result = cli(env, *[str(path) if part == "{file}" else part for part in command], topic)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert "is not a Kafka topic name: 1 to 249 letters, digits, '.', '_' or '-', and not '.' or '..'" in line
