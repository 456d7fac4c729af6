"""The one way the command line (``consolidator ...``, ``consolidator spark ...``, the demo) prints.

Guarantee: nothing a command prints can control the operator's terminal, whatever the data
holds. Group keys, item ids, topics, poison details and every other value a producer or a file
controls are printed as text:

- never read as rich markup (``[/]`` is printed as ``[/]``, ``[link=...]`` makes no link) nor
  as emoji codes;
- every non-printable character (ESC, BEL, the C1 controls, bidirectional overrides, line
  breaks inside a value...) escaped visibly (:func:`consolidator.rules.printable.printable`).

The rule holds for every string a :func:`console` renders (a printed line, a table's cells,
titles and headers), so no call site has to remember it; :func:`styled` colours the command's
own words, and :func:`echo` prints one plain line for the commands that do not use rich.
``tests/unit/test_printing.py`` checks that the CLI's modules print through nothing else.
"""

from __future__ import annotations

from typing import TextIO

import typer
from rich.console import Console
from rich.text import Text

from consolidator.rules.printable import printable

WIDE = 10_000  # piped output: lines never wrapped at 80 columns (ids and errors stay whole)


class DataConsole(Console):
    """A rich console on which every string is text: no markup, no emoji codes, no highlighting,
    and non-printable characters escaped (module docstring)."""

    def render_str(self, text: str, **kwargs) -> Text:
        kwargs.update(markup=False, emoji=False, highlight=False)
        return super().render_str(printable(text), **kwargs)


def console(stream: TextIO, *, stderr: bool = False) -> DataConsole:
    """A terminal gets rich's own width; a pipe or file gets lines that are never wrapped at
    80 columns (ids and errors stay on one line for grep and scripts)."""
    return DataConsole(stderr=stderr, width=None if stream.isatty() else WIDE, markup=False, emoji=False,
                       highlight=False)


def styled(words: str, style: str) -> Text:
    """The command's own ``words`` in a rich ``style`` (``"red"``, ``"bold green"``), made
    printable like any other text."""
    return Text(printable(words), style=style)


def echo(line: object, *, err: bool = False) -> None:
    """One plain line on stdout (stderr with ``err``), every non-printable character escaped:
    for output that does not go through a :func:`console` (JSON documents, the Spark commands)."""
    typer.echo(printable(line), err=err)


def confirm(question: object) -> None:
    """Ask ``question`` on stderr (made printable) and abort (exit 1) unless the answer is yes."""
    typer.confirm(printable(question), abort=True, err=True)
