"""When a shape's outputs provably stay within bounds, without computing them (pure).

A claim's outputs must stay within bounds (:func:`consolidator.rules.shape.within_bounds`: integers
within int64, doubles finite); where they might not, :func:`consolidator.rules.split.bounded_prefix`
splits the claim at the longest prefix that stays within them, which costs an aggregation per
probed prefix. :func:`bounds_safe` decides the common case at once: it bounds every output over
every subset of the events, so when it says yes, every prefix fits and the claim stays whole
(the same answer the probing gives).

The bound: an integer sum (or a ``group_sum`` field) is at most the sum of the absolute values
of the integers it adds; a sum with a double in it is at most the sum of the absolute values of
its doubles plus that of its integers, and stays finite while the doubles' part is at most
:data:`DOUBLE_SAFE` and the integers' part within int64; a ``first`` or
``last`` output is one of the values, which must fit itself; ``min``, ``max`` and ``distinct``
read numbers that ingest checked (integers within int64, doubles finite), and a count is small.
"""

from __future__ import annotations

from consolidator.rules.shape import INT64_MAX, INT64_MIN, Shape, lookup, within_bounds

_RISK = frozenset({"sum", "group_sum", "first", "last"})  # the outputs the bound concerns
DOUBLE_SAFE = 2.0**1020  # far below the largest double (about 2**1024): a sum this large stays finite


def may_leave_bounds(shape: Shape) -> bool:
    """Whether any output of ``shape`` can leave its bounds (else every claim fits)."""
    return any(o.op in _RISK and o.path is not None for o in shape.outputs)


def looked_values(shape: Shape, event: object) -> list:
    """The event's value at each output's path (None: absent, or an output without a path)."""
    return [None if o.path is None else lookup(event, o.path) for o in shape.outputs]


def _magnitude(values: list) -> tuple[int, float]:
    """The absolute values of the integers of ``values`` added up, and of its doubles."""
    return (sum(abs(v) for v in values if type(v) is int),
            sum(abs(v) for v in values if type(v) is float))


def bound_weights(shape: Shape, values: list) -> tuple[int, float]:
    """An event's weights toward the bounds, from its :func:`looked_values`: the largest, over the
    outputs that sum, of the absolute values of the integers it adds (``INT64_MAX + 1`` when a
    value a ``first`` or ``last`` output takes does not fit int64), and of its doubles."""
    integers, doubles = 0, 0.0
    for output, value in zip(shape.outputs, values, strict=True):
        if value is None or output.op not in _RISK:
            continue
        if output.op == "sum":
            weight, double = _magnitude([value])
            integers, doubles = max(integers, weight), max(doubles, double)
        elif output.op == "group_sum":
            for path in output.sums:
                weight, double = _magnitude([lookup(element, path) for element in value])
                integers, doubles = max(integers, weight), max(doubles, double)
        else:  # first, last: any value
            kind = type(value)
            if ((kind is int and not INT64_MIN <= value <= INT64_MAX)
                    or ((kind is list or kind is dict) and not within_bounds({"value": value}))):
                integers = INT64_MAX + 1
    return integers, doubles


def bounds_safe(shape: Shape, events: list) -> bool:
    """Whether no subset of ``events`` (retained events) gives an output beyond its bounds."""
    if not may_leave_bounds(shape):
        return True
    integers, doubles = 0, 0.0
    for event in events:
        weight, double = bound_weights(shape, looked_values(shape, event))
        integers, doubles = integers + weight, doubles + double
    return integers <= INT64_MAX and doubles <= DOUBLE_SAFE
