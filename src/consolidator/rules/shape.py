"""The event shape: what a batch aggregates over its members' newest events, and what of each
event it carries. Pure: no I/O (the spec file a setting names is read by
:mod:`consolidator.rules.shape_spec`, whose names this module re-exports).

A :class:`Shape` is the compiled form of two settings (docs/semantics.md section 6):

- ``CONSOLIDATOR_AGGREGATE``: a JSON list of named outputs, each an operation over a path of
  every member's newest event (:data:`OPERATIONS`); unset, the reference domain's one output
  (quantity summed per sku), which keeps the version 1 message byte for byte;
- ``CONSOLIDATOR_MEMBER_PAYLOAD``: ``none``, ``full`` or a JSON list of paths: each member of
  the message carries its newest event, whole or projected.

Guarantees:

- **One rule, both engines.** Ingest (:func:`retain`) keeps of an event exactly what the shape
  reads, as a JSON value; the batch (:func:`aggregate`) is a function of the retained values of
  its members in source-position order only. The Lambda path and the Spark jobs call these two
  functions, so they produce the same outputs for any shape.
- **Poison follows the spec.** A path the shape reads may be absent (or null): the member
  contributes nothing. Present with the wrong type, it is poison (``bad_value``), the detail
  naming the path and the expected type. A field no output reads is never looked at.
- **Numbers** (docs/guide/events.md, "Numbers"). A number is classified by its literal: digits only
  is an integer, whatever its size (the JSON parser reads one beyond 64 bits as a double: such
  a literal is found in the text, :func:`retain_with_values`); a fraction or an exponent makes
  a double. Where an output reads a number, an integer outside signed 64 bits is poison;
  where the shape keeps any value (``first``, ``last``, a member payload), integers are kept
  exactly within 64 bits (-2**63 .. 2**64-1) and one beyond is poison, never a double.
  Integer sums are exact. A sum with any double in it is a double: each value taken as a
  double (an integer beyond 2**53 is rounded to one), then summed exactly and rounded once
  (whatever the order); doubles are written as the shortest text that reads back as the same
  double. Every output stays within bounds (:func:`within_bounds`: integers within int64,
  doubles finite): a claim whose outputs would leave them is split, as the byte cap splits it,
  and an event whose ``group_sum`` alone leaves them is poison, the detail naming the element.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import orjson

from consolidator.rules.literals import (  # noqa: F401 (INT64_MIN, INT64_MAX, UINT64_MAX: re-exported)
    EXACT_DEPTH,
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    beyond_64_bits,
    exact_document,
    has_long_integer_literal,
    holds_a_double_past_int64,
    may_hold_long_integers,
)
from consolidator.rules.shape_spec import (  # noqa: F401 (re-exported: the shape's one public module)
    OPERATIONS,
    REFERENCE_SHAPE,
    Output,
    Path,
    Shape,
    ShapeError,
    default_outputs,
    parse_outputs,
    parse_path,
    parse_payload,
    show,
)

_NUMERIC = frozenset({"sum", "min", "max"})


class ValueFault(ValueError):
    """A value the shape reads has the wrong type: ``path`` and ``expected`` say which and what."""

    def __init__(self, path: str, expected: str, got: str) -> None:
        super().__init__(f"{path}: expected {expected}, got {got}")
        self.path, self.expected = path, expected


@dataclass(frozen=True, slots=True)
class EventView:
    """What a buffer row keeps of its newest event under a generic shape (a JSON value).
    Stored as the JSON object ``{"event": value}`` (orjson writes the dataclass so), which tells it
    from the reference shape's ``[[sku, quantity], ...]``."""

    event: object


# -- ingest: what a row keeps ---------------------------------------------------------------------


def _kind(value: object) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", int: "integer",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def lookup(document: object, path: Path, shown: str = "") -> object:
    """The value at ``path`` (None when absent or null); :class:`ValueFault` when a step is not an object."""
    value = document
    for segment in path:
        if type(value) is dict:
            value = value.get(segment)
        elif value is None:
            return None
        else:
            return _lookup_naming_the_fault(document, path, shown)
    return value


def _lookup_naming_the_fault(document: object, path: Path, shown: str) -> object:
    """:func:`lookup` step by step, to name the step that is not an object (it raises there)."""
    value = document
    for depth, segment in enumerate(path):
        if value is None:
            return None
        if type(value) is not dict:
            raise ValueFault(shown or show(path[:depth]), "object", _kind(value))
        value = value.get(segment)
    return value


def _number(value: object, where: str) -> None:
    kind = type(value)
    if kind is float:
        return
    if kind is not int:
        raise ValueFault(where, "number", _kind(value))
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueFault(where, "number within int64", "integer beyond int64")


def _check(output: Output, value: object) -> None:
    if value is None or output.op in ("count", "first", "last"):
        return
    kind = type(value)
    if kind is float or (kind is int and INT64_MIN <= value <= INT64_MAX):  # type: ignore[operator]
        if output.op != "group_sum":
            return  # a number, what every other operation accepts (the common case: no detail built)
    elif kind is str and output.op == "distinct":
        return
    where = show(output.path or ())
    if output.op in _NUMERIC:
        _number(value, where)
    elif output.op == "distinct":
        if type(value) is not str:
            _number(value, where)
    else:  # group_sum
        if type(value) is not list:
            raise ValueFault(where, "list", _kind(value))
        for index, element in enumerate(value):
            at = f"{where}[{index}]"
            if type(element) is not dict:
                raise ValueFault(at, "object", _kind(element))
            key = lookup(element, output.by, f"{at}.{show(output.by)}")
            if type(key) is not str or not key:
                raise ValueFault(f"{at}.{show(output.by)}", "non-empty string", _kind(key))
            for path in output.sums:
                _number(lookup(element, path, f"{at}.{show(path)}"), f"{at}.{show(path)}")
        _group_sums_within_bounds(output, value, where)


def _group_sums_within_bounds(output: Output, elements: list, where: str) -> None:
    """:class:`ValueFault` naming the last element of a group whose sum, in a batch of this event
    alone, leaves int64 (integers) or the double range (doubles)."""
    summed = _group_sum(output, [elements])
    if within_bounds({"sums": summed}):
        return
    by_name = output.by[-1]  # type: ignore[index]
    for group in summed:
        for path in output.sums:
            total = group[path[-1]]
            if within_bounds({"sum": total}):
                continue
            last = max(i for i, element in enumerate(elements) if lookup(element, output.by) == group[by_name])
            at = f"{where}[{last}].{show(path)}"
            if type(total) is int:
                raise ValueFault(at, "sums per group within int64 (a batch of this event alone adds them up)",
                                 "a larger sum")
            raise ValueFault(at, "sums per group within the double range (a batch of this event alone adds them"
                             " up)", "a sum beyond 1.8e308")


_ABSENT = object()


def _present(document: object, path: Path) -> object:
    """The value at ``path`` (an explicit null included), or :data:`_ABSENT` when a step is
    missing or is not an object."""
    value = document
    for segment in path:
        if type(value) is not dict:
            return _ABSENT
        value = value.get(segment, _ABSENT)  # type: ignore[attr-defined]
        if value is _ABSENT:
            return _ABSENT
    return value


def _project(document: dict, paths: Iterable[Path]) -> dict:
    """A new object with the values of ``document`` at ``paths``, nested as there, an explicit
    null kept as null. A path under one already kept adds nothing; one that is absent, or steps
    through a value that is not an object (null included), is left out (only the outputs' own
    paths are checked, by :func:`_check`)."""
    kept: dict = {}
    taken: set[Path] = set()
    for path in sorted(paths, key=len):
        if any(path[:depth] in taken for depth in range(1, len(path))):
            continue
        value = _present(document, path)
        if value is _ABSENT:
            continue
        node = kept
        for segment in path[:-1]:
            node = node.setdefault(segment, {})
        node[path[-1]] = value
        taken.add(path)
    return kept


#: Opening brackets a JSON text may hold with its value surely within the encoder's nesting
#: limit (254 levels, the value wrapped in 4 by the message): its depth is at most their count.
_SURELY_SHALLOW = 240


def check_values(document: dict, shape: Shape) -> list:
    """:class:`ValueFault` when a value an output of ``shape`` reads in ``document`` has the wrong
    type; else the value at each output's path (None: absent, or an output without a path)."""
    values = []
    for output in shape.outputs:
        value = None
        if output.path is not None:
            value = lookup(document, output.path)
            _check(output, value)
        values.append(value)
    return values


def retain(document: dict, shape: Shape, source: bytes | None = None) -> EventView:
    """What a row keeps of the event ``document`` (a JSON object): the whole event when the
    member payload is ``full``, else its projection on the paths the shape reads. Raises
    :class:`ValueFault` when a value an output reads has the wrong type. ``source``: the JSON
    text ``document`` was read from, if known; with few brackets in it, the nesting is not
    encoded again to be checked (the same outcome, as its depth cannot exceed their count)."""
    return retain_with_values(document, shape, source)[0]


def retain_with_values(document: dict, shape: Shape, source: bytes | None = None) -> tuple[EventView, list]:
    """:func:`retain`'s view, and the event's value at each output's path (:func:`check_values`).
    With ``source``, its integer literals beyond 64 bits (which the JSON parser read as doubles)
    are found and classified as integers (:func:`_long_integers`)."""
    values = check_values(document, shape)
    kept = document if shape.full_payload else _project(document, shape.reads())
    if source is None or source.count(b"[") + source.count(b"{") > _SURELY_SHALLOW:
        try:  # as deep as the message holds it (message, members, member, event): the encoder's limit
            orjson.dumps([[[[kept]]]])
        except TypeError:
            raise ValueFault("(event)", "nesting the encoder can write (about 250 levels)", "deeper nesting") from None
    if source is not None and (may_hold_long_integers(source) if shape.full_payload else True) \
            and holds_a_double_past_int64(kept):  # what the shape keeps may be a long integer literal
        _long_integers(document, source, shape)
    return EventView(kept), values


def _long_integers(document: object, source: bytes, shape: Shape) -> None:
    """:class:`ValueFault` when an integer literal of ``source`` (a JSON text the parser accepted)
    that no 64-bit integer holds is where ``shape`` reads a number (outside int64: poison, as
    for any integer) or keeps a value (``first``, ``last``, the member payload: beyond 64 bits).
    Such a literal is found by its token (the parser gave a double for it), then located in the
    document read again with its integers exact (:mod:`consolidator.rules.literals`)."""
    if not has_long_integer_literal(source):
        return
    exact = exact_document(document, source)
    if exact is None:
        raise ValueFault("(event)", f"an event nested at most {EXACT_DEPTH} levels where it holds an integer"
                         " beyond 64 bits", "deeper nesting")
    check_values(exact, shape)  # a number an output reads: within int64 (_number)
    kept: list[tuple[str, object]] = [(show(o.path), lookup(exact, o.path)) for o in shape.outputs  # type: ignore[arg-type]
                                      if o.op in ("first", "last")]
    if shape.full_payload:
        kept.append(("", exact))
    else:
        kept.append(("", _project(exact, shape.payload_paths or ())))
    for where, value in kept:
        beyond = beyond_64_bits(value, where)
        if beyond is not None:
            path, digits = beyond
            raise ValueFault(path, "an integer within 64 bits (-2**63 .. 2**64-1)", f"an integer of {digits} digits")


def payload_of(view: EventView, shape: Shape) -> object:
    """The member's ``event`` in the message (only when :attr:`Shape.carries_payload`)."""
    if shape.full_payload:
        return view.event
    return _project(view.event, shape.payload_paths or ())


# -- the batch: outputs over the newest event of each item, in source-position order ------------


def _sum(values: Sequence[object]) -> int | float:
    """Integers: their exact sum. With a double among them: the exact sum of the values as
    doubles, rounded once; an infinity when that leaves the double range (never an exception:
    :func:`within_bounds` then tells the claim to split)."""
    if not any(type(v) is float for v in values):
        return sum(values)  # type: ignore[arg-type]
    try:
        return math.fsum(values)  # type: ignore[arg-type]
    except OverflowError:  # a partial sum overflowed: the exact sum decides, rounded once
        exact = sum(Fraction(float(v)) for v in values)  # type: ignore[arg-type]
        try:
            return float(exact)
        except OverflowError:
            return math.inf if exact > 0 else -math.inf


def _distinct_key(value: object) -> tuple:
    return (1, value, "") if type(value) is str else (0, value, orjson.dumps(value))


def _group_sum(output: Output, lists: Iterable[object]) -> list[dict]:
    totals: dict[str, list[list[object]]] = {}
    for elements in lists:
        for element in elements or ():  # type: ignore[union-attr]
            columns = totals.setdefault(lookup(element, output.by), [[] for _ in output.sums])  # type: ignore[arg-type]
            for column, path in zip(columns, output.sums, strict=True):
                column.append(lookup(element, path))
    by_name = output.by[-1]  # type: ignore[index]
    return [{by_name: key, **{p[-1]: _sum(c) for p, c in zip(output.sums, columns, strict=True)}}
            for key, columns in sorted(totals.items())]


def _evaluate(output: Output, events: Sequence[object]) -> object:
    if output.path is None:
        return len(events)  # count of members
    return reduce_values(output, [v for v in (lookup(e, output.path) for e in events) if v is not None])


def reduce_values(output: Output, values: list) -> object:
    """An output with a path over the present values at its path, in source-position order."""
    op = output.op
    if op == "count":
        return len(values)
    if op == "sum":
        return _sum(values)
    if op in ("min", "max"):
        return (min if op == "min" else max)(values) if values else None
    if op == "first":
        return values[0] if values else None
    if op == "last":
        return values[-1] if values else None
    if op == "distinct":
        seen = {_distinct_key(v): v for v in values}
        return [seen[k] for k in sorted(seen)]
    return _group_sum(output, values)


def aggregate(shape: Shape, events: Sequence[object]) -> dict[str, object]:
    """Every output over ``events``: the retained newest event of each item, in source-position
    order. A function of its arguments only, so every engine gets the same outputs."""
    return {o.name: _evaluate(o, events) for o in shape.outputs}


def within_bounds(outputs: dict[str, object]) -> bool:
    """Whether every integer of ``outputs`` fits a signed 64-bit integer and every double is
    finite (else the claim splits)."""
    def fits(value: object) -> bool:
        if type(value) is int:
            return INT64_MIN <= value <= INT64_MAX
        if type(value) is float:
            return math.isfinite(value)
        if type(value) is list:
            return all(fits(v) for v in value)
        if type(value) is dict:
            return all(fits(v) for v in value.values())
        return True
    return fits(outputs)


def stored_items(text: str | bytes) -> tuple[tuple[str, int], ...] | EventView:
    """A buffer row's ``items`` column: ``[[sku, quantity], ...]`` (the reference shape) as
    pairs, or ``{"event": value}`` (a generic shape) as an :class:`EventView`."""
    parsed = orjson.loads(text)
    if type(parsed) is dict:
        return EventView(parsed["event"])
    return tuple(map(tuple, parsed))


def stored_text(items: tuple[tuple[str, int], ...] | EventView) -> str:
    """The ``items`` column of a row (the inverse of :func:`stored_items`)."""
    return orjson.dumps(items).decode()
