"""docs/guide/operations.md runs: every ``$ consolidator ...`` line of its console examples is run, in
the order of the page, against a fresh database, and each documented output
line must have the shape of a line the command printed: numbers, batch ids and spacing aside,
the same words; a documented JSON document must have the same keys; a documented ``echo $?``
must be the exit code. A line that cannot run here is listed in SKIPPED with the reason."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import env  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "guide" / "operations.md"
QUICKSTART = ROOT / "docs" / "guide" / "quickstart.md"
REDIS_DB13 = "redis://127.0.0.1:6379/13"

# Documented commands that do not run in this test, and why (matched by prefix).
SKIPPED = {
    "consolidator status --json | jq": "a jq filter of the JSON of the line before",
    "consolidator kafka serve": "runs until Ctrl-C: tests/integration/test_cli_kafka.py",
    "consolidator kafka produce": "needs the cluster of `kafka serve`: tests/integration/test_cli_kafka.py",
    "consolidator dlq list --json | jq": "a jq filter of the dead letter",
    "jq ": "fixed.jsonl is written by the test itself (jq need not be installed)",
    "consolidator dlq redrive --batch-id 3f2a...": "an elided batch id",
    "consolidator batch ": "a sealed batch id of the example: tests/integration/test_cli_batch.py",
    "consolidator partitions drop p202607": "a partition of the example's months",
    "consolidator offsets reset": "asks for confirmation; tests/integration/test_cli_details.py",
    "make demo": "tests/integration/test_demo.py",
}
# Documented outputs that need a state this test does not make (matched by a part of the output).
SKIPPED_OUTPUT = {"has schema version": "a database of an older schema: the migration floor's tests",
                  "the pre-v4 ledger may still decide": "a schema 3 ledger with a gap: test_migrate_versions.py",
                  "applied migrations [13]": "after the ledger refusal above: test_migrate_versions.py"}
# The example's values that differ here.
SUBSTITUTED = {"consolidator flush --seconds 60": "consolidator flush --seconds 1"}
# The state the page's examples assume, made after the line named: pending groups to show.
THEN = {"consolidator db migrate --json": "consolidator ingest --file seed.jsonl"}


def examples(doc: Path = DOC) -> list[tuple[str, list[str], int]]:
    """(command, documented output lines, documented exit code) of every ``$`` line of the
    page's console blocks, in order; ``...`` lines (elided output) are dropped."""
    found: list[list] = []
    in_block = False
    lines = doc.read_text().splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if line.startswith("```"):
            in_block = line.strip() == "```console"
            continue
        if not in_block:
            continue
        if line.startswith("$ "):
            command = line[2:]
            while command.endswith("\\"):
                command = command[:-1] + lines[index].strip()
                index += 1
            command = re.split(r"\s{2,}# ", command)[0].strip()
            if command == "echo $?":
                found[-1][2] = int(lines[index].strip())
                index += 1
                continue
            found.append([command, [], 0])
        elif found and line.strip() not in ("...", ""):
            found[-1][1].append(line.replace("^C", ""))
    return [tuple(f) for f in found]


def shape(line: str) -> str:
    """A line without its values: batch ids, numbers, lists of numbers and runs of blanks made
    alike."""
    line = re.sub(r"\[\d+(, \d+)*\]", "[<n>, ...]", line)
    line = re.sub(r"\b[0-9a-f]{32}\b|\b[0-9a-f]{4}\.\.\.", "<id>", line)
    line = re.sub(r"/tmp/\S+?(?=[,:)\s]|$)", "<path>", line)
    line = re.sub(r"\d+(\.\d+)?", "<n>", line)
    return re.sub(r"\s+", " ", line).strip()


def keys(document: object) -> object:
    if isinstance(document, dict):
        return {k: keys(v) for k, v in document.items() if not isinstance(v, list) or k != "problems"}
    if isinstance(document, list):
        return [keys(document[0])] if document and isinstance(document[0], dict) else []
    return None


def _seed(workdir: Path) -> None:
    """Files the page's examples read: the `events/` sample, a records file with a malformed
    second line."""
    (workdir / "events").mkdir()
    shutil.copy(ROOT / "events" / "orders.jsonl", workdir / "events" / "orders.jsonl")
    record = {"topic": "orders", "partition": 0, "offset": 1, "timestamp": 1_795_000_000_000, "key": "WH-1",
              "value": {"location_id": "WH-1", "order_id": "R1", "items": []}}
    seed = [{"location_id": group, "order_id": f"S{n}", "items": [{"sku": "SKU-1", "quantity": 1}]}
            for n, group in enumerate(["WH-1", "WH-1", "WH-2"])]
    (workdir / "seed.jsonl").write_text("".join(json.dumps(event) + "\n" for event in seed))
    (workdir / "records.jsonl").write_text(json.dumps(record) + "\nnot json\n"
                                           + json.dumps(record | {"offset": 3}) + "\n")


def _fixed_from_dead_letter(workdir: Path) -> None:
    """What the page's jq line does: the bad_quantity entry with a fixed value."""
    entries = [json.loads(line) for line in (workdir / "dead-letter.jsonl").read_text().splitlines() if line]
    fixed = [e | {"value": {"location_id": "WH-9", "order_id": "Z1", "items": [{"sku": "S", "quantity": 1}]}}
             for e in entries if e.get("reason") == "bad_quantity"]
    (workdir / "fixed.jsonl").write_text("".join(json.dumps(e) + "\n" for e in fixed))


@pytest.mark.parametrize("doc", [DOC, QUICKSTART], ids=["docs/guide/operations.md", "docs/guide/quickstart.md"])
def test_every_documented_command_prints_what_the_page_shows(env, tmp_path, doc):  # noqa: F811
    """docs/guide/operations.md starts from an empty environment (its first example is the error
    without a database) and exports the database; the quick start's example follows its set-up,
    which exported the database and migrated it."""
    database_url = env["CONSOLIDATOR_DATABASE_URL"]
    _seed(tmp_path)
    shell_env = {k: v for k, v in os.environ.items() if not k.startswith("CONSOLIDATOR_")} | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "200",
        "CONSOLIDATOR_SINK_URL": f"file://{tmp_path}/batches.jsonl",
        "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{tmp_path}/dead-letter.jsonl",
        "CONSOLIDATOR_REDIS_URL": REDIS_DB13, "CONSOLIDATOR_DEBOUNCE_SECONDS": "0.001",
        "CONSOLIDATOR_EVENT_TTL_SECONDS": "0",
    }
    if doc != DOC:
        shell_env["CONSOLIDATOR_DATABASE_URL"] = database_url
        subprocess.run(["bash", "-c", "consolidator db migrate"], check=True, cwd=tmp_path, env=shell_env,
                       capture_output=True, timeout=120)
    checked, problems = 0, []
    for command, documented, code in examples(doc):
        if any(part in line for part in SKIPPED_OUTPUT for line in documented):
            continue
        if any(command.startswith(prefix) for prefix in SKIPPED):
            if command.startswith("jq "):
                _fixed_from_dead_letter(tmp_path)
            continue
        if command.startswith("export "):
            name, _, value = command.removeprefix("export ").partition("=")
            value = database_url if name == "CONSOLIDATOR_DATABASE_URL" else value.replace("$PWD", str(tmp_path))
            shell_env[name] = value
            continue
        assert command.startswith("consolidator "), f"an example the test does not know: {command!r}"
        run = SUBSTITUTED.get(command, command) + (f" && {THEN[command]} >/dev/null 2>&1" if command in THEN else "")
        result = subprocess.run(["bash", "-c", run], check=False, cwd=tmp_path, env=shell_env, capture_output=True,
                                text=True, timeout=120)
        checked += 1
        printed = (result.stdout + result.stderr).splitlines()
        if result.returncode != code:
            problems.append(f"{command}: exit {result.returncode}, the page says {code}: {result.stderr[-300:]}")
        shapes = {shape(line) for line in printed}
        documents = [keys(json.loads(line)) for line in printed if line.startswith("{") and line.endswith("}")]
        for line in documented:
            if line.startswith("{"):
                if keys(json.loads(line)) not in documents:
                    problems.append(f"{command}: the page's JSON {line[:80]}... has other keys than {documents}")
            elif shape(line) not in shapes:
                problems.append(f"{command}: the page's line {line.strip()!r} is not printed; printed: {printed}")
    assert checked >= (20 if doc == DOC else 3), checked
    assert not problems, "\n".join(problems)


def test_the_documented_schema_version_is_the_codes():
    from test_cli import VERSIONS

    text = DOC.read_text()
    documented = {int(a or b) for a, b in re.findall(r'; schema version (\d+)|"schema_version": (\d+)', text)}
    assert documented == {VERSIONS[-1]}, documented



def _commands(command=None, path: tuple[str, ...] = ()):
    """(path, command) of every command of the CLI but the Spark group's."""
    import typer
    from typer._click import Context

    from consolidator.cli import app

    command = command or typer.main.get_command(app)
    if hasattr(command, "list_commands"):
        for name in command.list_commands(Context(command)):
            if name != "spark":
                yield from _commands(command.get_command(Context(command), name), (*path, name))
    else:
        yield path, command


def test_every_command_help_names_the_variables_it_reads():
    """The variables come from the settings models the command loads: every required one is
    named (the database as URL or secret); a command that reads none says so."""
    from test_cli import cli

    from consolidator import settings
    from consolidator.cli.base import SettingsCommand

    for path, command in _commands():
        text = " ".join(cli({}, *path, "--help").stdout.split())
        if not isinstance(command, SettingsCommand):
            assert "no CONSOLIDATOR_* variable" in text or "Reads CONSOLIDATOR_" in text, path
            continue
        for model_name in command.settings_models.values():
            for name in getattr(settings, model_name).model_fields:
                assert f"{settings.ENV_PREFIX}{name.upper()}" in text, (path, name)
        assert "CONSOLIDATOR_DATABASE_URL (or CONSOLIDATOR_DATABASE_SECRET_ARN)" in text, path


def test_top_level_help_names_every_group():
    from test_cli import cli

    text = cli({}, "--help").stdout
    description = " ".join(text.split("Options:")[0].split())
    for path, _ in _commands():
        assert path[0] in description, path[0]
    assert "spark" in description


@pytest.mark.parametrize("command", ["stream", "replay", "emr-submit"])
def test_spark_help_in_the_style_of_the_cli(command):
    """Piped, the Spark commands' help is plain text like every other command's: no boxes, no
    '--help <bool>', no reStructuredText backticks."""
    from test_cli import cli

    result = cli({}, "spark", command, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage: root spark" in result.stdout
    for mark in ("╭", "│", "<bool>", "``"):
        assert mark not in result.stdout, mark
