"""Decoding a batch of values under a generic event shape, the common case in a tight loop.

Under a generic shape (:mod:`consolidator.shape`) the JVM fast path proves nothing (what an
event keeps is only known to ``events.decode``), so both Spark jobs decode every value in
Python. :func:`decode_shaped` does the common case with less work per value than
``events.decode``: one ``orjson`` parse, the identifiers as plain strings, the shape's checks
compiled once per shape (:func:`checker`), and one encoding of what the event keeps. Whatever it
cannot decode with certainty (poison, identifiers that are integers, a ``group_sum`` value that
is not plainly valid, very deep nesting, ...) it leaves to ``events.decode``, which finds the
reason.

Guarantee: where it decodes a value, the group key, item id and items text are exactly
:func:`~consolidator.spark.transforms.decode_value`'s (``tests/unit/test_decode_shape.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import orjson

from consolidator.events import MAX_KEY_CHARS, FieldNames
from consolidator.shape import (
    _NUMERIC,
    INT64_MAX,
    INT64_MIN,
    EventView,
    Output,
    Shape,
    ValueFault,
    _check,
    _project,
)


def _number(value: object) -> bool:
    kind = type(value)
    return kind is float or (kind is int and INT64_MIN <= value <= INT64_MAX)


def _value_check(output: Output) -> Callable[[object], bool]:
    """Whether a present value at the output's path certainly passes ``shape._check``."""
    if output.op in ("count", "first", "last"):
        return lambda value: True
    if output.op in _NUMERIC:
        return _number
    if output.op == "distinct":
        return lambda value: type(value) is str or _number(value)

    def group_sum(value: object) -> bool:
        try:
            _check(output, value)
        except ValueFault:
            return False
        return True

    return group_sum


@functools.lru_cache(maxsize=64)
def checker(shape: Shape) -> Callable[[dict], bool]:
    """Whether ``shape.retain`` certainly accepts a document (False: it may not, ask it)."""
    checks = [(o.path, _value_check(o)) for o in shape.outputs if o.path is not None]

    def accepts(document: dict) -> bool:
        for path, check in checks:
            value = document
            for segment in path:
                if value is None:
                    break
                if type(value) is not dict:
                    return False
                value = value.get(segment)
            if value is not None and not check(value):
                return False
        return True

    return accepts


def decode_shaped(values: Sequence[bytes | None], names: FieldNames,
                  max_event_bytes: int) -> tuple[list[str | None], list[str | None], list[str | None], list[int]]:
    """Group keys, item ids and items texts (``shape.stored_text``) of ``values`` under
    ``names.shape``, None where not decoded here, and the indices of those values: they go
    to ``events.decode``."""
    shape = names.shape
    assert shape is not None
    accepts = checker(shape)
    group_name, item_name = names.group_key, names.item_id
    reads = shape.reads()
    count = len(values)
    groups: list[str | None] = [None] * count
    items: list[str | None] = [None] * count
    texts: list[str | None] = [None] * count
    rest = []
    for index, value in enumerate(values):
        if not value or len(value) > max_event_bytes:
            rest.append(index)
            continue
        try:
            document = orjson.loads(value)
        except orjson.JSONDecodeError:
            rest.append(index)
            continue
        if type(document) is not dict:
            rest.append(index)
            continue
        group, item = document.get(group_name), document.get(item_name)
        if (type(group) is not str or type(item) is not str or not 0 < len(group) <= MAX_KEY_CHARS
                or not 0 < len(item) <= MAX_KEY_CHARS or not accepts(document)):
            rest.append(index)
            continue
        kept = document if shape.full_payload else _project(document, reads)
        try:  # as deep as shape.retain checks the nesting (``[[[[kept]]]]``), and the stored text
            text = orjson.dumps([[[EventView(kept)]]])[3:-3].decode()
        except TypeError:
            rest.append(index)
            continue
        groups[index], items[index], texts[index] = group, item, text
    return groups, items, texts, rest
