"""The options of ``consolidator spark`` are a public interface (scripts, EMR job arguments): this
snapshot fails when one is renamed, dropped or added, or its type, default or help changes.
After an intended change: ``SNAPSHOT_UPDATE=1 pytest tests/spark/test_spark_cli_options.py``
rewrites ``tests/snapshots/spark_cli_options.json``; review its diff."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer.main

from consolidator.cli.spark.commands import spark_app

SNAPSHOT = Path(__file__).resolve().parents[1] / "snapshots" / "spark_cli_options.json"


def options_of_every_command() -> dict[str, dict[str, dict[str, object]]]:
    """command -> option name -> its flags, type, default and help (sorted by name: the order of
    the help page is not part of the interface)."""
    group = typer.main.get_command(spark_app)
    found: dict[str, dict[str, dict[str, object]]] = {}
    for name, command in sorted(group.commands.items()):
        options = {}
        for param in command.params:
            if not param.opts or not param.opts[0].startswith("--"):
                continue
            options[param.opts[0]] = {
                "flags": sorted(param.opts + param.secondary_opts),
                "type": getattr(param.type_descriptor.annotation, "__name__", repr(param.type_descriptor.annotation)),
                "multiple": param.multiple, "flag": param.is_flag,
                "default": param.default if isinstance(param.default, (str, int, float, bool, type(None))) else repr(param.default),
                "help": " ".join((getattr(param, "help", None) or "").split()),
            }
        found[name] = dict(sorted(options.items()))
    return found


def test_spark_cli_options_match_the_snapshot():
    current = options_of_every_command()
    if os.environ.get("SNAPSHOT_UPDATE") == "1":
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    assert current == json.loads(SNAPSHOT.read_text()), "spark CLI options changed: SNAPSHOT_UPDATE=1 rewrites"
