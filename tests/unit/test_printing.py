"""One rule for printed data (consolidator.cli.render, consolidator.rules.printable): the package prints only
through it, and it prints every string as text. The scan reads every module of the package, so
a new command that prints some other way fails here, not on an operator's terminal."""

from __future__ import annotations

import ast
import io
import re
from pathlib import Path

import pytest
from rich.table import Table

from consolidator.cli.render import DataConsole, styled
from consolidator.rules.printable import echoed, printable

SRC = Path(__file__).resolve().parents[2] / "src" / "consolidator"
RENDER = SRC / "cli" / "render.py"
# Calls that write to the terminal without the rule: print(), typer/click echo and prompts, a rich
# Console of its own, rich Text built from markup, the standard streams' write.
FORBIDDEN = {"print", "typer.echo", "typer.secho", "click.echo", "click.secho", "typer.confirm", "typer.prompt",
             "click.confirm", "click.prompt", "Console", "rich.console.Console", "Text", "Text.from_markup",
             "Text.assemble", "sys.stdout.write", "sys.stderr.write", "sys.stdout.buffer.write"}


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return "?"


def unruled_prints(path: Path, root: Path = SRC) -> list[str]:
    """``file:line call`` of every call in ``path`` that prints around the rule, in line order."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        markup_off = any(k.arg == "markup" and isinstance(k.value, ast.Constant) and k.value.value is False
                         for k in node.keywords)
        if name in FORBIDDEN or (name.endswith("TextColumn") and not markup_off):
            found.append((node.lineno, f"{path.relative_to(root)}:{node.lineno} {name}"))
    return [line for _, line in sorted(found)]


def test_the_package_prints_only_through_the_rendering_rule():
    modules = [p for p in SRC.rglob("*.py") if p != RENDER]
    assert len(modules) > 100 and SRC / "cli" / "batch.py" in modules
    assert [line for p in sorted(modules) for line in unruled_prints(p)] == []


def test_the_scan_finds_each_way_around_the_rule(tmp_path):
    module = tmp_path / "command.py"
    module.write_text("import sys, typer\nfrom rich.console import Console\nfrom rich.text import Text\n"
                      "print(key)\ntyper.echo(key)\nConsole().print(key)\nText.from_markup(key)\n"
                      "sys.stderr.write(key)\nTextColumn('{task.description}')\nTextColumn('x', markup=False)\n")
    assert [line.split(" ")[1] for line in unruled_prints(module, tmp_path)] == [
        "print", "typer.echo", "Console", "Text.from_markup", "sys.stderr.write", "TextColumn"]


HOSTILE = ["[/]", "[link=https://evil.example]click[/link]", "[bold red]x", ":smile:",
           "\x1b]0;title\x07\x1b[2J", "a\u202eb", "c\x9bd", "line\nbreak", "tab\there", "nul\x00", "\ud800"]


@pytest.mark.parametrize("value", HOSTILE, ids=ascii)
def test_a_console_prints_any_string_as_text(value):
    stream = io.StringIO()
    console = DataConsole(file=stream, width=1000, force_terminal=True)  # a terminal: styles are on
    table = Table(title=value)
    table.add_column(value)
    table.add_row(value)
    console.print(styled("error:", "red"), value)
    console.print(table)
    written = stream.getvalue()
    assert printable(value) in written
    without_styles = re.sub(r"\x1b\[[0-9;]*m", "", written)  # the console's own styles (SGR)
    assert "\x1b" not in without_styles, ascii(written)
    assert not [c for c in without_styles if not (c.isprintable() or c == "\n")], ascii(written)


def test_printable_escapes_what_a_terminal_would_act_on_and_keeps_the_rest():
    assert printable("WH-1 ümlaut 東京 [/]") == "WH-1 ümlaut 東京 [/]"
    assert printable("\x1b]0;t\x07\x1b[2J") == "\\x1b]0;t\\x07\\x1b[2J"
    assert printable("a\u202eb\u2066c\x9bd\x7fe\ud800") == "a\\u202eb\\u2066c\\x9bd\\x7fe\\ud800"
    assert printable("x\ny\tz\r") == "x\\ny\\tz\\r"
    assert printable(42) == "42"


def test_echoed_values_are_quoted_printable_and_bounded():
    assert echoed("abc") == "'abc'"
    assert echoed("\x1b[2J") == "'\\x1b[2J'"
    long = "f" * 250_000
    shown = echoed(long)
    assert shown == "'" + "f" * 79 + "... (250,000 characters)"
    assert len(echoed(list(range(100_000)))) < 120
    assert echoed(b"\x00" * 1000, limit=10).endswith("... (1,000 bytes)")


def cut_reprs(path: Path) -> list[str]:
    """``file:line`` of every f-string field that cuts a repr by precision (``{x!r:.80}``): a
    bound of its own, instead of the one rule (:func:`consolidator.rules.printable.echoed`)."""
    return [f"{path.relative_to(SRC)}:{node.lineno}" for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.FormattedValue) and node.conversion == ord("r") and node.format_spec is not None]


def test_echoed_values_are_bounded_by_the_one_helper():
    assert [line for p in sorted(SRC.rglob("*.py")) for line in cut_reprs(p)] == []
