"""The real ingest handler (functions/ingest/handler.py) against a local schema registry: its
environment, an invocation in this process, and one in a child process (a crash of the
decoder then fails the test instead of killing pytest)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from consolidator.demo.lambda_context import LocalLambdaContext
from consolidator.sources.msk import event_from_records

ROOT = Path(__file__).resolve().parents[1]


def handler_environment(database_url: str, dead_letter: Path, registry_url: str, value_format: str = "avro",
                        **settings: str) -> dict[str, str]:
    """The ingest function's variables: ``settings`` are CONSOLIDATOR_ names without the prefix."""
    return {"CONSOLIDATOR_DATABASE_URL": database_url, "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{dead_letter}",
            "POWERTOOLS_TRACE_DISABLED": "1", "CONSOLIDATOR_VALUE_FORMAT": value_format,
            "CONSOLIDATOR_SCHEMA_REGISTRY_URL": registry_url,
            **{f"CONSOLIDATOR_{name}": value for name, value in settings.items()}}


def load_handler():
    """A fresh copy of the handler module (its service is built on its first invocation)."""
    spec = importlib.util.spec_from_file_location("ingest_handler_under_test", ROOT / "functions" / "ingest" / "handler.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dead_letters(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def failed_offsets(response: dict) -> list[int]:
    return [f["itemIdentifier"]["offset"] for f in response["batchItemFailures"]]


_CHILD = """
import json, sys, tracemalloc
sys.path.insert(0, sys.argv[2])
from registry_handler import load_handler
from consolidator.demo.lambda_context import LocalLambdaContext
event = json.loads(open(sys.argv[1]).read())
module = load_handler()
tracemalloc.start()
response = module.handler(event, LocalLambdaContext())
print(json.dumps({"response": response, "peak_bytes": tracemalloc.get_traced_memory()[1]}))
"""


def invoke_in_child(records, environment: dict[str, str], work: Path, timeout_s: float = 120) -> tuple[int, dict, str]:
    """(exit code, {"response", "peak_bytes"} or {}, stderr) of one invocation of the handler
    in a child process; ``peak_bytes``: the most memory Python held during the invocation."""
    event = work / "event.json"
    event.write_text(json.dumps(event_from_records(records)))
    done = subprocess.run([sys.executable, "-c", _CHILD, str(event), str(Path(__file__).parent)], check=False,
                          env={**os.environ, **environment}, capture_output=True, text=True, timeout=timeout_s)
    lines = done.stdout.strip().splitlines()
    return done.returncode, json.loads(lines[-1]) if done.returncode == 0 and lines else {}, done.stderr[-2000:]


def invoke(module, records) -> dict:
    return module.handler(event_from_records(records), LocalLambdaContext())
