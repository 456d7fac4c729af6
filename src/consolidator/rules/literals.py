"""Integer literals beyond 64 bits in a JSON text (pure): finding them, and reading the text again
with every integer exact.

The JSON parser of the hot path (orjson) reads an integer literal outside -2**63 .. 2**64-1 as a
double, so ``-9223372036854775809`` and ``-9.223372036854776e18`` come out alike. The contract
classifies a number by its literal (docs/guide/events.md, "Numbers"), so where such a double matters
the text is consulted: cheaply first (:func:`may_hold_long_integers`: any such literal has 19
digits or more; :func:`holds_a_double_past_int64`: the parser made a double of magnitude 2**63
or more of it), then by its tokens (:func:`has_long_integer_literal`), and only then read again
exactly (:func:`exact_document`, msgspec: an integer of any length stays an integer).
"""

from __future__ import annotations

import re

import msgspec

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1  # what the message's encoder writes exactly, beside int64
EXACT_DEPTH = 500  # msgspec reads recursively: a document read exactly stays far from Python's stack limit

#: Every integer literal beyond 64 bits has 19 digits or more: a text without such a run has
#: none. The run is found on the text with each digit made "1" and every other byte "0" (C speed).
_DIGITS_AS_ONES = bytes(0x31 if 0x30 <= byte <= 0x39 else 0x30 for byte in range(256))
_LONG_RUN = b"1" * 19
#: The string and number tokens of a JSON text; group 1: an integer literal of 19 digits or more.
_NUMBER_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|(-?[0-9]{19,})(?![.eE0-9])'
                            rb"|-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def may_hold_long_integers(source: bytes) -> bool:
    """False when the JSON text ``source`` surely holds no integer literal beyond 64 bits."""
    return _LONG_RUN in source.translate(_DIGITS_AS_ONES)


def has_long_integer_literal(source: bytes) -> bool:
    """Whether the JSON text ``source`` (one the parser accepted) holds an integer literal outside
    -2**63 .. 2**64-1, outside its strings."""
    return any(t and not INT64_MIN <= int(t) <= UINT64_MAX for t in _NUMBER_TOKENS.findall(source))


def holds_a_double_past_int64(value: object) -> bool:
    """Whether ``value`` holds a double of magnitude 2**63 or more: what the JSON parser makes of
    an integer literal outside -2**63 .. 2**64-1 (so without one, no such literal is there)."""
    stack = [value]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is float:
            if abs(node) >= 2.0**63:  # type: ignore[arg-type]
                return True
        elif kind is dict:
            stack.extend(node.values())  # type: ignore[union-attr]
        elif kind is list:
            stack.extend(node)  # type: ignore[arg-type]
    return False


def depth(document: object) -> int:
    """How deeply ``document`` nests (a scalar: 0), without recursion."""
    deepest, stack = 0, [(document, 1)]
    while stack:
        node, level = stack.pop()
        kind = type(node)
        if kind is dict or kind is list:
            deepest = max(deepest, level)
            stack += [(child, level + 1) for child in (node.values() if kind is dict else node)]  # type: ignore[union-attr]
    return deepest


def exact_document(document: object, source: bytes) -> object | None:
    """``source`` (the JSON text ``document`` was read from) read again with every integer exact,
    however long its literal; None when it nests deeper than :data:`EXACT_DEPTH` levels."""
    if depth(document) > EXACT_DEPTH:
        return None
    return msgspec.json.decode(source)


def beyond_64_bits(value: object, where: str) -> tuple[str, int] | None:
    """The path (under ``where``) of the first integer in ``value`` outside -2**63 .. 2**64-1, and
    its number of digits; None when there is none."""
    stack = [(where, value)]
    while stack:
        at, node = stack.pop()
        kind = type(node)
        if kind is int:
            if not INT64_MIN <= node <= UINT64_MAX:  # type: ignore[operator]
                return at or "(event)", len(str(abs(node)))  # type: ignore[arg-type]
        elif kind is dict:
            stack += [(f"{at}.{key}" if at else key, item) for key, item in reversed(node.items())]  # type: ignore[union-attr]
        elif kind is list:
            stack += [(f"{at}[{index}]", item) for index, item in reversed(list(enumerate(node)))]  # type: ignore[arg-type]
    return None
