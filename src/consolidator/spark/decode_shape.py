"""Decoding a batch of values under a generic event shape, the common case in a tight loop.

Under a generic shape (:mod:`consolidator.rules.shape`) the JVM fast path proves nothing (what an
event keeps is only known to ``events.decode``), so both Spark jobs decode every value in
Python. :func:`decode_shaped` does the common case with less work per value than
``events.decode``: one ``orjson`` parse, the identifiers as plain strings, then ``retain``
itself (:func:`consolidator.rules.shape.retain_with_values`) and one encoding of what the event keeps.
The replay's decoding after the shuffle (:mod:`consolidator.spark.deferred`) keeps what the
simulation reads instead, the member payload encoded and the outputs' values
(:func:`decode_kept`). Whatever it cannot decode with certainty (poison, identifiers that are
integers, a value of the wrong type, very deep nesting, ...) it leaves to ``events.decode``,
which finds the reason.

Guarantee: where it decodes a value, the group key, item id and items text are exactly
:func:`~consolidator.spark.transforms.decode_value`'s, and :class:`Kept` is what the simulation
computes from that text (``tests/unit/test_decode_shape.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

import orjson

from consolidator.rules.events import MAX_KEY_CHARS, FieldNames
from consolidator.rules.shape import (
    EventView,
    Shape,
    ValueFault,
    payload_of,
    retain,
    retain_with_values,
    stored_text,
)

T = TypeVar("T")


class Kept(NamedTuple):
    """What the simulation needs of a decoded event: its member payload as the message writes it
    (``payload_of``, keys sorted; None: the shape carries none), its values at the outputs'
    paths (:func:`consolidator.rules.shape_bounds.looked_values`), and the value, for :meth:`view`."""

    payload: str | None
    looked: list
    value: bytes
    shape: Shape

    def view(self) -> EventView:
        """What the row keeps (``shape.retain`` of the value: it accepted it once already)."""
        return retain(orjson.loads(self.value), self.shape, self.value)


def _decode(values: Sequence[bytes | None], names: FieldNames, max_event_bytes: int,
            keep: Callable[[bytes, EventView, list], T]) -> tuple[list[str | None], list[str | None], list[T | None], list[int]]:
    """Group keys, item ids and ``keep(value, what its row keeps, its values at the outputs'
    paths)`` (:func:`consolidator.rules.shape.retain_with_values`) of ``values`` under ``names.shape``,
    None where not decoded here, and the indices of those values: they go to ``events.decode``."""
    shape = names.shape
    assert not shape.is_reference
    group_name, item_name = names.group_key, names.item_id
    count = len(values)
    groups: list[str | None] = [None] * count
    items: list[str | None] = [None] * count
    kept: list[T | None] = [None] * count
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
                or not 0 < len(item) <= MAX_KEY_CHARS):
            rest.append(index)
            continue
        try:
            view, looked = retain_with_values(document, shape, value)
        except ValueFault:
            rest.append(index)
            continue
        groups[index], items[index], kept[index] = group, item, keep(value, view, looked)
    return groups, items, kept, rest


def decode_kept(values: Sequence[bytes | None],
                names: FieldNames, max_event_bytes: int) -> tuple[list[str | None], list[str | None], list[Kept | None], list[int]]:
    """Group keys, item ids and :class:`Kept` of ``values`` under ``names.shape``, None where not
    decoded here, and the indices of those values: they go to ``events.decode``."""
    shape = names.shape
    assert not shape.is_reference

    def keep(value: bytes, view: EventView, looked: list) -> Kept:
        payload = None
        if shape.carries_payload:
            payload = orjson.dumps(payload_of(view, shape), option=orjson.OPT_SORT_KEYS).decode()
        return Kept(payload, looked, value, shape)

    return _decode(values, names, max_event_bytes, keep)


def decode_shaped(values: Sequence[bytes | None], names: FieldNames,
                  max_event_bytes: int) -> tuple[list[str | None], list[str | None], list[str | None], list[int]]:
    """Group keys, item ids and items texts (``shape.stored_text``) of ``values`` under
    ``names.shape``, None where not decoded here, and the indices of those values: they go
    to ``events.decode``."""
    return _decode(values, names, max_event_bytes, lambda value, view, looked: stored_text(view))
