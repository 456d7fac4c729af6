"""Operator CLI: ``consolidator --help``. One module per command group; this module wires them.

Settings come from ``CONSOLIDATOR_*`` environment variables (the same ones the Lambda
functions read). Exit codes: 0 done, 1 failed or refused (the message says why),
2 usage or configuration error. Commands a script would parse accept ``--json`` and then
print exactly one JSON document on stdout.
"""

from __future__ import annotations

from consolidator.cli import batch_find, demo, flush, status, worker  # noqa: F401 (they register their commands)
from consolidator.cli import ingest as _ingest  # noqa: F401 (registers `ingest`)
from consolidator.cli.base import app
from consolidator.cli.batch import batch_app
from consolidator.cli.db import db_app
from consolidator.cli.dlq import dlq_app
from consolidator.cli.docs import docs_app
from consolidator.cli.kafka import kafka_app
from consolidator.cli.limits import limits_app
from consolidator.cli.offsets import offsets_app
from consolidator.cli.partitions import partitions_app

app.add_typer(batch_app, name="batch")
app.add_typer(db_app, name="db")
app.add_typer(dlq_app, name="dlq")
app.add_typer(docs_app, name="docs")
app.add_typer(kafka_app, name="kafka")
app.add_typer(offsets_app, name="offsets")
app.add_typer(limits_app, name="limits")
app.add_typer(partitions_app, name="partitions")

__all__ = ["app", "main"]


def main() -> None:  # pragma: no cover - console entry point alias
    app()
