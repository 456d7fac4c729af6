"""When a shape's integer outputs provably fit int64, without computing them (pure).

A claim's integer outputs must fit a signed 64-bit integer; where they might not,
:func:`consolidator.rules.batch.int64_prefix` splits the claim at the longest prefix that fits, which
costs an aggregation per probed prefix. :func:`int64_safe` decides the common case at once: it
bounds every output over every subset of the events, so when it says yes, every prefix fits
and the claim stays whole (the same answer the probing gives).

The bound: a sum (or a ``group_sum`` field) is at most the sum of the absolute values of the
integers it adds; a ``first`` or ``last`` output is one of the values, which must fit itself;
``min``, ``max`` and ``distinct`` read numbers that ingest checked to be within int64, and a
count is small.
"""

from __future__ import annotations

from consolidator.rules.shape import INT64_MAX, INT64_MIN, Shape, lookup, within_int64

_RISK = frozenset({"sum", "group_sum", "first", "last"})  # the outputs the bound concerns


def int64_bounded(shape: Shape) -> bool:
    """Whether any output of ``shape`` can leave int64 (else every claim fits)."""
    return any(o.op in _RISK and o.path is not None for o in shape.outputs)


def looked_values(shape: Shape, event: object) -> list:
    """The event's value at each output's path (None: absent, or an output without a path)."""
    return [None if o.path is None else lookup(event, o.path) for o in shape.outputs]


def int64_weight(shape: Shape, values: list) -> int:
    """An event's weight toward the bound, from its :func:`looked_values`: the largest, over the
    outputs that sum, of the absolute values of the integers it adds; ``INT64_MAX + 1`` when a
    value a ``first`` or ``last`` output takes does not fit int64."""
    weight = 0
    for output, value in zip(shape.outputs, values, strict=True):
        if value is None or output.op not in _RISK:
            continue
        if output.op == "sum":
            weight = max(weight, abs(value) if type(value) is int else 0)
        elif output.op == "group_sum":
            for path in output.sums:
                weight = max(weight, sum(abs(v) for element in value if type(v := lookup(element, path)) is int))
        else:  # first, last: any value
            kind = type(value)
            if ((kind is int and not INT64_MIN <= value <= INT64_MAX)
                    or ((kind is list or kind is dict) and not within_int64({"value": value}))):
                return INT64_MAX + 1
    return weight


def int64_safe(shape: Shape, events: list) -> bool:
    """Whether no subset of ``events`` (retained events) gives an output beyond int64."""
    if not int64_bounded(shape):
        return True
    return sum(int64_weight(shape, looked_values(shape, e)) for e in events) <= INT64_MAX
