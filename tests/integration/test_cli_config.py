"""Configuration errors in the CLI: exit code 2, one line naming every bad variable, no
traceback, no credential."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BAD = {
    "CONSOLIDATOR_DATABASE_URL": "mysql://app:hunter2@db:notaport/x",
    "CONSOLIDATOR_REDIS_URL": "redis://:tok3n@cache:6379/zero",
    "CONSOLIDATOR_SINK_URL": "kafka://b1:9092",
    "CONSOLIDATOR_DEAD_LETTER_URL": "file://",
    "CONSOLIDATOR_TICK_INTERVAL_SECONDS": "inf",
}


@pytest.mark.parametrize(("command", "names"), [
    (["status"], ["CONSOLIDATOR_DATABASE_URL"]),
    (["flush", "--once"], list(BAD)),
    (["flush", "--dry-run"], ["CONSOLIDATOR_DATABASE_URL", "CONSOLIDATOR_TICK_INTERVAL_SECONDS"]),  # needs no sink or Redis
])
def test_bad_configuration_exits_2_naming_every_variable_without_secrets(command, names):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONSOLIDATOR_")}
    result = subprocess.run([str(Path(sys.executable).parent / "consolidator"), *command], env={**env, **BAD},
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, (result.stdout, result.stderr)
    output = result.stdout + result.stderr
    for name in names:
        assert name in output
    assert "Traceback" not in output
    assert "hunter2" not in output and "tok3n" not in output


@pytest.mark.parametrize("spec", ['{"name": "n", "op": "count"}', ' {"name": "n", "op": "count"}\n'])
def test_an_inline_spec_that_is_one_object_is_refused_as_not_a_list_not_taken_for_a_file(monkeypatch, tmp_path, spec):
    from test_cli import cli

    for name in [n for n in os.environ if n.startswith("CONSOLIDATOR_")]:
        monkeypatch.delenv(name)
    lines = tmp_path / "events.jsonl"
    lines.write_text('{"location_id": "W", "order_id": "A"}\n')
    env = {"CONSOLIDATOR_DATABASE_URL": "mysql://root@127.0.0.1:3306/unused", "CONSOLIDATOR_AGGREGATE": spec,
           "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{tmp_path / 'dead.jsonl'}"}
    result = cli(env, "ingest", "--file", str(lines))
    message = " ".join(result.stderr.split())
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "CONSOLIDATOR_AGGREGATE" in message and "must be a JSON list of outputs, got one object" in message
    assert "No such file" not in message and "Traceback" not in result.stderr
