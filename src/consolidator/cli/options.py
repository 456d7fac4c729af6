"""Parsers of command-line options shared by the operator CLI (``consolidator.cli``) and the
Spark commands (``consolidator.cli.spark.commands``), and the help style both use.

Guarantee: a count or duration option is a finite number within its range, or a usage error
(exit 2) whose one line names the option, the value as typed and the allowed range; an option
that sets the same quantity as a setting has that setting's type and bounds (declared once, in
:mod:`consolidator.settings`); a topic option is a Kafka topic name (:data:`consolidator.sources.msk.TOPIC`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import typer

from consolidator.rules.printable import echoed, printable

# Usage errors and help in boxes only on a terminal: piped, they are plain unwrapped lines. Every
# Typer app of the CLI (the lazily loaded Spark group too) uses this mode.
MARKUP_MODE = "rich" if sys.stderr.isatty() else None


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def bounded(low: float, high: float, unit: str = "", *, integer: bool = False) -> Callable[[object], float]:
    """The parser of a count or duration option: a finite number from ``low`` to ``high``
    (whole when ``integer``), or a usage error (exit 2) naming the value and the allowed range."""
    kind = "a whole number" if integer else "a number"
    allowed = f"allowed {_number(low)} to {_number(high)}{unit}"

    def parse(value: object) -> float:
        text = str(value).strip()
        try:
            number = int(text) if integer else float(text)
        except ValueError:
            raise typer.BadParameter(f"{echoed(text, 40)} is not {kind}: {allowed}") from None
        if not (math.isfinite(number) and low <= number <= high):
            raise typer.BadParameter(f"{printable(text[:40])} is out of range: {allowed}")
        return number

    return parse


def as_setting(name: str) -> Callable[[object], object]:
    """The parser of an option that sets the same quantity as the setting ``name``: its type and
    bounds, declared once in the settings model; a usage error (exit 2) naming the value and the
    allowed range otherwise."""

    def parse(value: object) -> object:
        from consolidator.settings import check_setting

        try:
            value = float(str(value))  # a number from here on (the setting's type decides what fits)
        except ValueError:
            pass  # refused below as not a number, shown as typed
        try:
            return check_setting(name, value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None

    return parse


def topic_name(value: object) -> str:
    """The parser of a topic option: a Kafka topic name (1 to 249 letters, digits, ``.``, ``_``,
    ``-``; not ``.`` or ``..``), or a usage error naming the value and the rule."""
    from consolidator.sources.msk import TOPIC, TOPIC_RULE

    text = str(value)
    if not TOPIC.fullmatch(text):
        raise typer.BadParameter(f"{echoed(text, 60)} is not a Kafka topic name: {TOPIC_RULE}")
    return text
