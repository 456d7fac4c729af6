"""The event shape's specification (docs/semantics.md section 6): the settings
``CONSOLIDATOR_AGGREGATE`` (named outputs, :data:`OPERATIONS` over paths of each member's newest
event) and ``CONSOLIDATOR_MEMBER_PAYLOAD`` (``none``, ``full`` or a list of paths) compiled into a
:class:`Shape`. Pure: no I/O but reading a spec file named by the setting. What a shape keeps
and computes: :mod:`consolidator.rules.shape`, which re-exports these names."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path as FilePath

import orjson

from consolidator.rules.printable import echoed

#: count: members (whose value at ``path`` is present, when a path is given);
#: sum/min/max: numbers; first/last: any value, by source position; distinct: the sorted set of
#: strings and numbers; group_sum: a list of objects grouped by ``by``, the ``sum`` fields summed.
OPERATIONS = ("count", "sum", "min", "max", "first", "last", "distinct", "group_sum")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_ENTRY_KEYS = {"name", "op", "path", "by", "sum"}


class ShapeError(ValueError):
    """A bad aggregation spec or member payload setting; the message names every bad entry."""


Path = tuple[str, ...]


def parse_path(text: object) -> Path:
    """``a.b.c`` (or ``$.a.b.c``) as its segments; ValueError when it is not such a path."""
    if type(text) is not str:
        raise ValueError(f"a path is a string like 'a.b', not {echoed(text)}")
    body = text.removeprefix("$.")
    segments = tuple(body.split("."))
    if not body or any(not s for s in segments):
        raise ValueError(f"path {echoed(text)} has an empty segment")
    return segments


def show(path: Path) -> str:
    return ".".join(path)


@dataclass(frozen=True, slots=True)
class Output:
    """One named output: ``op`` over ``path`` (``by``/``sums``: relative to each list element)."""

    name: str
    op: str
    path: Path | None = None
    by: Path | None = None
    sums: tuple[Path, ...] = ()


@dataclass(frozen=True, slots=True)
class Shape:
    """A compiled aggregation spec and member payload: with ``full_payload`` each member carries
    its whole newest event, else with ``payload_paths`` its projection on them, else nothing.
    :data:`REFERENCE_SHAPE` (``is_reference``) is the default: the reference domain's ``items``
    summed per sku, read by the configured field names, in the version 1 message."""

    outputs: tuple[Output, ...]
    full_payload: bool = False
    payload_paths: tuple[Path, ...] | None = None
    is_reference: bool = False

    @property
    def carries_payload(self) -> bool:
        return self.full_payload or self.payload_paths is not None

    def reads(self) -> tuple[Path, ...]:
        """The top paths of the event the shape keeps (outputs and payload), without repeats."""
        paths = [o.path for o in self.outputs if o.path is not None] + list(self.payload_paths or ())
        return tuple(dict.fromkeys(paths))


#: The default shape, when neither an aggregation spec nor a member payload is configured: every
#: "which shape?" asks ``shape.is_reference`` of the one shape it is given.
REFERENCE_SHAPE = Shape((), is_reference=True)


def default_outputs(items: str, sku: str, quantity: str) -> tuple[Output, ...]:
    """The reference domain's spec: the quantity summed per sku over the items list."""
    return (Output("items", "group_sum", (items,), (sku,), ((quantity,),)),)


def _required_path(entry: dict, key: str, example: str) -> Path:
    """``entry[key]`` as a path; a ValueError that names the key and shows an example when it is
    missing (rather than "not None")."""
    if entry.get(key) is None:
        raise ValueError(f"{key} is missing, e.g. {example}")
    return parse_path(entry[key])


_PATH_EXAMPLES = {"group_sum": '"path": "items" (the list of objects it groups)',
                  "count": '"path": "amount" (count the members that have it)'}


def _entry(index: int, entry: object, names: set[str]) -> tuple[Output | None, list[str]]:
    where = f"entry {index}"
    if not isinstance(entry, dict):
        return None, [f"{where}: must be an object, got {type(entry).__name__}"]
    faults = []
    name, op = entry.get("name"), entry.get("op")
    if isinstance(name, str):
        where = f"entry {index} ({echoed(name, 40)})"
    elif isinstance(op, str):
        where = f"entry {index} (op {echoed(op, 40)})"
    if name is None:
        faults.append('name is missing: every output has one, e.g. "name": "total"')
    elif not isinstance(name, str) or not _NAME.match(name):
        faults.append("name must match [A-Za-z_][A-Za-z0-9_]{0,63}")
    elif name in names:
        faults.append("name is used twice")
    else:
        names.add(name)
    if unknown := sorted(set(entry) - _ENTRY_KEYS):
        faults.append(f"unknown keys {echoed(unknown)}")
    if op not in OPERATIONS:
        faults.append(f"op must be one of {', '.join(OPERATIONS)}, got {echoed(op)}")
    path = by = None
    sums: tuple[Path, ...] = ()
    if "path" in entry or op != "count":
        try:
            path = _required_path(entry, "path", _PATH_EXAMPLES.get(op, '"path": "amount" (the value it reads)'))
        except ValueError as exc:
            faults.append(str(exc))
    if op == "group_sum":
        try:
            by = _required_path(entry, "by", '"by": "sku" (the field of each object to group by)')
            listed = entry.get("sum")
            if listed is None:
                raise ValueError('sum is missing, e.g. "sum": ["quantity"] (the fields of each object to add up)')
            if not isinstance(listed, list) or not listed:
                raise ValueError("sum must be a non-empty list of paths")
            sums = tuple(parse_path(p) for p in listed)
            if len({by[-1], *(s[-1] for s in sums)}) != 1 + len(sums):
                raise ValueError("by and sum fields must end in different names (they name the output's fields)")
        except ValueError as exc:
            faults.append(str(exc))
    elif "by" in entry or "sum" in entry:
        faults.append("by and sum belong to group_sum only")
    if faults:
        return None, [f"{where}: {'; '.join(faults)}"]
    return Output(name, op, path, by, sums), []


def parse_outputs(text: str) -> tuple[Output, ...]:
    """CONSOLIDATOR_AGGREGATE: inline JSON (starting with ``[``; one starting with ``{`` is
    refused as an object, not read as a file name) or the path of a JSON file. One
    :class:`ShapeError` names every bad entry."""
    source = text.strip()
    if not source.startswith(("[", "{")):  # an object is inline JSON too, never a file name
        try:
            source = FilePath(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise ShapeError(f"neither inline JSON (a list) nor a readable file: {exc.strerror}: {text!r}") from None
    try:
        entries = orjson.loads(source)
    except orjson.JSONDecodeError as exc:
        raise ShapeError(f"not JSON: {exc}") from None
    if isinstance(entries, dict):
        raise ShapeError("must be a JSON list of outputs, got one object: write it as [{...}]")
    if not isinstance(entries, list) or not entries:
        raise ShapeError("must be a non-empty JSON list of outputs")
    outputs, faults, names = [], [], set()
    for index, entry in enumerate(entries):
        output, bad = _entry(index, entry, names)
        faults += bad
        if output is not None:
            outputs.append(output)
    if faults:
        raise ShapeError("; ".join(faults))
    return tuple(outputs)


def parse_payload(text: str) -> tuple[bool, tuple[Path, ...] | None]:
    """CONSOLIDATOR_MEMBER_PAYLOAD: ``none``, ``full`` or a JSON list of paths."""
    if text in ("none", "full"):
        return text == "full", None
    try:
        listed = orjson.loads(text)
        if not isinstance(listed, list) or not listed:
            raise ValueError("a non-empty list")
        return False, tuple(dict.fromkeys(parse_path(p) for p in listed))
    except (orjson.JSONDecodeError, ValueError) as exc:
        raise ShapeError(f"must be none, full or a JSON list of paths like [\"a.b\"]: {exc}") from None
