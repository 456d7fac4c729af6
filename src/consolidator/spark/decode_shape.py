"""Decoding a batch of values under a generic event shape, the common case in a tight loop.

Under a generic shape (:mod:`consolidator.shape`) the JVM fast path proves nothing (what an
event keeps is only known to ``events.decode``), so both Spark jobs decode every value in
Python. :func:`decode_shaped` does the common case with less work per value than
``events.decode``: one ``orjson`` parse, the identifiers as plain strings, the values the
outputs read checked by :func:`consolidator.shape.check_values` (as ``retain`` checks them),
and one encoding of what the event keeps. Whatever it cannot decode with certainty (poison,
identifiers that are integers, a value of the wrong type, very deep nesting, ...) it leaves to ``events.decode``, which finds the
reason.

Guarantee: where it decodes a value, the group key, item id and items text are exactly
:func:`~consolidator.spark.transforms.decode_value`'s (``tests/unit/test_decode_shape.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from consolidator.events import MAX_KEY_CHARS, FieldNames
from consolidator.shape import EventView, Shape, ValueFault, _project, check_values


def _accepted(document: dict, shape: Shape) -> bool:
    """Whether ``shape.retain`` accepts the values ``document`` holds at the outputs' paths."""
    try:
        check_values(document, shape)
    except ValueFault:
        return False
    return True


def decode_shaped(values: Sequence[bytes | None], names: FieldNames,
                  max_event_bytes: int) -> tuple[list[str | None], list[str | None], list[str | None], list[int]]:
    """Group keys, item ids and items texts (``shape.stored_text``) of ``values`` under
    ``names.shape``, None where not decoded here, and the indices of those values: they go
    to ``events.decode``."""
    shape = names.shape
    assert shape is not None
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
                or not 0 < len(item) <= MAX_KEY_CHARS or not _accepted(document, shape)):
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
