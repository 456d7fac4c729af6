"""The replay report shows producer text as text: a group key with terminal controls, a table's
column separator or backticks neither reaches a terminal that prints report.md nor breaks its
tables (no Spark needed)."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("matplotlib")

from test_report import FIGURES

from consolidator.cli.spark.report import write_report
from consolidator.spark.figures import InputSummary

HOSTILE_KEY = "WH\x1b]0;owned\x07\x1b[2J|`x`\u202e"


def test_worst_groups_and_the_input_are_printable_in_markdown_and_html(tmp_path):
    worst = ({"group_key": HOSTILE_KEY, "latency_p95_ms": 1_000.0, "latency_max_ms": 2_000, "batches": 1},)
    source = InputSummary("json in\x1b[2J/", ("in\x1b[2J/a.jsonl",), 1, 1, 1_795_000_000_000, 1_795_000_000_000)
    paths = write_report([replace(f, worst_groups=worst) for f in FIGURES], tmp_path, source)
    markdown, page = paths["markdown"].read_text(), paths["html"].read_text()
    for text in (markdown, page):
        assert not [c for c in text if not (c.isprintable() or c == "\n")], ascii(text)
    assert "| P1 | `` WH\\x1b]0;owned\\x07\\x1b[2J\\|`x`\\u202e `` | 1.0 s | 2.0 s | 1 |" in markdown
    assert "source: json in\\x1b[2J/" in markdown
    assert "<code>WH\\x1b]0;owned\\x07\\x1b[2J|`x`\\u202e</code>" in page
