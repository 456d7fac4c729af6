"""The configuration reference (docs/reference/configuration.md), written from the declarations:
every ``CONSOLIDATOR_*`` variable with its default, bounds, doc line, the runtimes that read it
and where else it reaches. ``consolidator docs config`` (``make docs``) writes the page; a test
fails when the committed page differs, so the reference is never written by hand."""

from __future__ import annotations

import inspect
import typing
from typing import Literal

from pydantic_core import PydanticUndefined

from consolidator.settings.base import ENV_PREFIX, OTHER_VARIABLES, all_models, field_range, reach

PAGE = "docs/reference/configuration.md"

# The sections of the page: the module that declares a setting, in reading order.
SECTIONS = {
    "connections": "Database, dead-letter destination, sink",
    "fields": "Event fields and shape",
    "policy": "Flush policy",
    "value_format": "Value format and schema registry",
    "models": "Per runtime",
    "kafka": "Kafka source (worker, spark stream)",
    "worker": "Worker",
}

HEADER = f"""# Configuration reference

<!-- Written by `consolidator docs config` (`make docs`) from the declarations in
src/consolidator/settings/; do not edit: change the declaration and run `make docs`. -->

Every setting is an environment variable with the prefix `{ENV_PREFIX}`, read when a handler or
command starts (never at import). An empty variable counts as unset. Every bad or missing variable
is reported at once, in one error naming each (exit code 2 in the CLI), with credentials masked; a
`{ENV_PREFIX}*` variable no setting knows stops start-up with one error naming it and the closest
known name (`{ENV_PREFIX}DEBOUNSE_SECONDS ... did you mean {ENV_PREFIX}DEBOUNCE_SECONDS?`). URL settings
are checked for what their destination needs; an option the code does not read is refused, never
ignored.

Each setting is declared once, in `src/consolidator/settings/` (type, default, unit in its name,
bounds, doc line); the Lambda handlers, the CLI, the worker, the Spark jobs and the CDK environment
files all read that declaration. Columns: **used by**: the runtimes whose settings read it (CLI: the
operator commands only; each command's `--help` names the variables it reads); **also**: `env file`
when a CDK environment file sets it (its `policy` section; the stack passes it to every function
that reads it), and the `consolidator spark` option that overrides it (same name and unit; replay
*grid*: comma-separated candidates, one policy each).
"""


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _default(info) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return "required"
    value = info.default_factory() if info.default_factory is not None else info.default
    if value is None:
        return "–"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int | float):
        return f"`{_number(value)}`"
    return f"`{value}`" if not isinstance(value, dict) else f"`{value or '{}'}`"


def _allowed(info) -> str:
    bounds = field_range(info)
    if bounds != "x":
        return f"`{bounds}`"
    kinds = [info.annotation] if typing.get_origin(info.annotation) is Literal else typing.get_args(info.annotation)
    for kind in kinds:
        if typing.get_origin(kind) is Literal:
            return ", ".join(f"`{choice}`" for choice in typing.get_args(kind))
    return ""


def _also(name: str, info) -> str:
    where = reach(info)
    parts = ["env file"] if where["deployed"] else []
    if where["spark"]:
        flag = where["option"] or "--" + name.replace("_", "-")
        commands = ", ".join(f"{c} (grid)" if c == "replay" and where["grid"] else c for c in where["spark"])
        parts.append(f"`{flag}` ({commands})")
    return "; ".join(parts)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def declarations() -> dict[str, tuple[type, object, list[str]]]:
    """Setting name -> (the class that declares it, its ``FieldInfo``, the runtimes that read it)."""
    found: dict[str, tuple[type, object, list[str]]] = {}
    models = all_models()
    for model in models:
        for name in inspect.get_annotations(model):
            if name in model.model_fields and name not in found:
                found[name] = (model, model.model_fields[name], [])
    for model in models:
        if (used_by := model.__dict__.get("USED_BY")) is None:
            continue
        for name in model.model_fields:
            if used_by not in found[name][2]:
                found[name][2].append(used_by)
    return found


def configuration_reference() -> str:
    """The text of the configuration reference page."""
    sections: dict[str, list[str]] = {title: [] for title in SECTIONS.values()}
    for name, (declared_in, info, used_by) in declarations().items():
        title = SECTIONS.get(declared_in.__module__.rsplit(".", 1)[-1], declared_in.__module__)
        order = ["ingest", "flush", "cleanup", "migrate", "acks", "worker", "spark stream", "spark replay",
                 "spark emr-submit", "CLI"]
        runtimes = ", ".join(sorted(used_by, key=lambda r: order.index(r) if r in order else len(order)))
        sections.setdefault(title, []).append(
            f"| `{ENV_PREFIX}{name.upper()}` | {_default(info)} | {_allowed(info)} | {runtimes} | {_also(name, info)} "
            f"| {_cell(info.description or '')} |")
    lines = [HEADER.rstrip("\n")]
    for title, rows in sections.items():
        if rows:
            lines += ["", f"## {title}", "", "| variable | default | allowed | used by | also | meaning |",
                      "|---|---|---|---|---|---|", *rows]
    lines += ["", "## Read outside the settings", "",
              "Known, so that start-up does not take them for misspelt settings:", ""]
    lines += [f"- `{variable}`: {_cell(where)}" for variable, where in sorted(OTHER_VARIABLES.items())]
    return "\n".join(lines) + "\n"
