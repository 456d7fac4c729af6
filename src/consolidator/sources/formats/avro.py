"""Avro values, read with the writer's schema (the schema the value names) by a reader compiled
from that schema, bounded while it reads.

Guarantees, for any bytes and any schema the registry serves:

- the decoded document nests at most :data:`~consolidator.sources.formats.limits.MAX_DECODED_DEPTH`
  containers (records, arrays, maps); a deeper value is ``undecodable_value`` poison. Recursive
  schemas are read like any other: the depth is counted on the value, in Python frames only, so
  no value can exhaust the C stack;
- the document's JSON text is counted while it is built, and the read stops as soon as that
  count passes the event size cap (``too_large`` poison). The count is a lower bound of the JSON
  text's length (every value at least its shortest JSON form), so a value is refused here only
  when its JSON would be refused anyway, and never after materialising more than the cap: an
  array that declares 10^8 items of a type that takes no bytes is refused at its block count;
- the read never raises anything but poison: cut short, trailing bytes, a union or enum index out
  of range, an int out of its range, invalid UTF-8, a logical value out of range.

What the document holds is what fastavro's reader gives for the same value (``tests/unit``
compares them): bytes and fixed as base64 text, decimals as decimal text, the date and time
logical types as ISO-8601 text (fastavro's own conversions), records as objects by field name,
unions as the chosen branch's value.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from consolidator.rules.events import PoisonReason
from consolidator.sources.formats.base import poison
from consolidator.sources.formats.limits import MAX_DECODED_DEPTH


class _Input:
    """The value being read: its bytes, the read position, the JSON bytes still allowed and the
    containers still allowed to open."""

    __slots__ = ("data", "depth", "left", "pos")

    def __init__(self, data: bytes, left: int) -> None:
        self.data, self.pos, self.left, self.depth = data, 0, left, MAX_DECODED_DEPTH


class _TooLarge(Exception):
    pass


class _TooDeep(Exception):
    pass


class _Bad(Exception):
    """A value this schema cannot have (the message says what)."""


Read = Callable[[_Input], Any]
_UNPACK_FLOAT, _UNPACK_DOUBLE = struct.Struct("<f").unpack_from, struct.Struct("<d").unpack_from
_LONG_MIN, _LONG_MAX, _INT_MIN, _INT_MAX = -(2**63), 2**63 - 1, -(2**31), 2**31 - 1


def _varint(s: _Input) -> int:
    """A zigzag varint of at most 10 bytes (an Avro long); IndexError when cut short."""
    data, pos = s.data, s.pos
    byte = data[pos]
    pos += 1
    result, shift = byte & 0x7F, 7
    while byte & 0x80:
        if shift > 63:
            raise _Bad("a varint is longer than 10 bytes")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
    s.pos = pos
    return (result >> 1) ^ -(result & 1)


def _long(s: _Input) -> int:
    byte = s.data[s.pos]
    if byte < 0x80:  # one byte: -64..63, the common case
        s.pos += 1
        s.left -= 1
        return (byte >> 1) ^ -(byte & 1)
    value = _varint(s)
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise _Bad(f"long {value} is outside 64 bits")
    s.left -= 1
    return value


def _int(s: _Input) -> int:
    value = _varint(s)
    if not _INT_MIN <= value <= _INT_MAX:
        raise _Bad(f"int {value} is outside 32 bits")
    s.left -= 1
    return value


def _null(s: _Input) -> None:
    s.left -= 4


def _boolean(s: _Input) -> bool:
    byte = s.data[s.pos]
    if byte > 1:
        raise _Bad(f"boolean byte {byte} is neither 0 nor 1")
    s.pos += 1
    s.left -= 4
    return byte == 1


def _float(s: _Input) -> float:
    (value,) = _UNPACK_FLOAT(s.data, s.pos)
    s.pos += 4
    s.left -= 1
    return value


def _double(s: _Input) -> float:
    (value,) = _UNPACK_DOUBLE(s.data, s.pos)
    s.pos += 8
    s.left -= 1
    return value


def _length(s: _Input) -> int:
    size = _varint(s)
    if size < 0:
        raise _Bad(f"negative length {size}")
    if s.pos + size > len(s.data):
        raise IndexError
    return size


def _take(s: _Input, size: int, json_size: int) -> bytes:
    if json_size > s.left:
        raise _TooLarge
    s.left -= json_size
    start = s.pos
    s.pos = start + size
    return s.data[start:s.pos]


def _base64_size(size: int) -> int:
    return 4 * ((size + 2) // 3) + 2


def _bytes(s: _Input) -> bytes:
    size = _length(s)
    return _take(s, size, _base64_size(size))


def _string(s: _Input) -> str:
    data, start = s.data, s.pos
    size = data[start]
    if size < 0x80 and not size & 1:  # a length under 64 in one byte, the common case
        size >>= 1
        start += 1
        if start + size > len(data):
            raise IndexError
    else:
        size = _length(s)
        start = s.pos
    if size + 2 > s.left:
        raise _TooLarge
    s.left -= size + 2
    s.pos = start + size
    return data[start:s.pos].decode("utf-8")


def _fixed(size: int) -> Read:
    json_size = _base64_size(size)

    def read(s: _Input) -> bytes:
        if s.pos + size > len(s.data):
            raise IndexError
        return _take(s, size, json_size)

    return read


def _enum(symbols: list[str]) -> Read:
    count = len(symbols)

    def read(s: _Input) -> str:
        index = _varint(s)
        if not 0 <= index < count:
            raise _Bad(f"enum index {index} is not one of the {count} symbols")
        symbol = symbols[index]
        s.left -= len(symbol) + 2
        return symbol

    return read


def _union(branches: list[Read]) -> Read:
    count = len(branches)

    def read(s: _Input) -> Any:
        index = _varint(s)
        if not 0 <= index < count:
            raise _Bad(f"union index {index} is not one of the {count} branches")
        return branches[index](s)

    return read


def _open(s: _Input, json_size: int) -> None:
    s.depth -= 1
    if s.depth < 0:
        raise _TooDeep
    s.left -= json_size


def _close(s: _Input) -> None:
    s.depth += 1
    if s.left < 0:
        raise _TooLarge


def _record(fields: list[tuple[str, Read]]) -> Read:
    # {"a":...,"b":...}: braces, each key quoted with its colon, the commas between fields
    skeleton = 2 + sum(len(name) + 3 for name, _ in fields) + max(len(fields) - 1, 0)

    def read(s: _Input) -> dict:
        s.depth -= 1
        if s.depth < 0:
            raise _TooDeep
        s.left -= skeleton
        document = {name: field(s) for name, field in fields}
        s.depth += 1
        if s.left < 0:
            raise _TooLarge
        return document

    return read


def _block_count(s: _Input, taken: int, per_entry: int) -> int:
    """The item count of the next block (0: the end), after checking that ``count`` more
    entries, each at least ``per_entry`` JSON bytes plus its comma, fit what is left."""
    count = _varint(s)
    if count < 0:  # a negative count is followed by the block's size in bytes
        count = -count
        _varint(s)
    if count:
        commas = count if taken else count - 1
        if count * per_entry + commas > s.left:
            raise _TooLarge
        s.left -= commas
    return count


def _array(item: Read) -> Read:
    def read(s: _Input) -> list:
        _open(s, 2)
        items: list = []
        while count := _block_count(s, len(items), 1):
            items.extend([item(s) for _ in range(count)])
            if s.left < 0:
                raise _TooLarge
        _close(s)
        return items

    return read


def _map(value: Read) -> Read:
    def read(s: _Input) -> dict:
        _open(s, 2)
        document: dict = {}
        taken = 0
        while count := _block_count(s, taken, 4):  # "":0 at least
            for _ in range(count):
                key = _string(s)
                s.left -= 1  # the colon
                document[key] = value(s)
            taken += count
            if s.left < 0:
                raise _TooLarge
        _close(s)
        return document

    return read


def _logical(base: Read, convert: Callable, schema: dict) -> Read:
    """fastavro's conversion of a logical type; its JSON counts as at least one byte (decimal
    text is shorter than the base64 of its bytes, so the base's own count is not a bound)."""

    def read(s: _Input) -> Any:
        before = s.left
        value = base(s)
        s.left = before - 1
        return convert(value, schema, schema)

    return read


_PRIMITIVES: dict[str, Read] = {"null": _null, "boolean": _boolean, "int": _int, "long": _long,
                                "float": _float, "double": _double, "bytes": _bytes, "string": _string}


class _Compiler:
    """Readers of a parsed schema's types; a named type is compiled once, and a reference to a
    type being compiled (recursion) goes through a trampoline to it."""

    def __init__(self, named: dict[str, Any]) -> None:
        from fastavro.read import LOGICAL_READERS

        self.named, self.logical = named, LOGICAL_READERS
        self.compiled: dict[str, Read] = {}

    def reader(self, schema: Any) -> Read:
        if isinstance(schema, str):
            return _PRIMITIVES.get(schema) or self._named(schema)
        if isinstance(schema, list):
            return _union([self.reader(branch) for branch in schema])
        kind = schema["type"]
        if kind in ("record", "error", "enum", "fixed"):
            return self._named(schema["name"], schema)
        if kind == "array":
            read = _array(self.reader(schema["items"]))
        elif kind == "map":
            read = _map(self.reader(schema["values"]))
        else:
            read = self.reader(kind)
        convert = self.logical.get(f"{kind}-{schema.get('logicalType')}")
        return read if convert is None else _logical(read, convert, schema)

    def _named(self, name: str, schema: dict | None = None) -> Read:
        known = self.compiled.get(name)
        if known is not None:
            return known
        schema = schema if schema is not None else self.named[name]
        cell: list[Read] = []
        self.compiled[name] = lambda s: cell[0](s)  # what recursive references call
        kind = schema["type"]
        if kind == "enum":
            read = _enum(list(schema["symbols"]))
        elif kind == "fixed":
            read = _fixed(int(schema["size"]))
            convert = self.logical.get(f"fixed-{schema.get('logicalType')}")
            read = read if convert is None else _logical(read, convert, schema)
        else:
            read = _record([(field["name"], self.reader(field["type"])) for field in schema["fields"]])
        cell.append(read)
        self.compiled[name] = read
        return read


def avro_document_reader(schema_id: str, text: str) -> Callable[[bytes, int], Any]:
    """``read(payload, max_json_bytes)``: the document of an Avro value written with the schema
    ``text``. Poison when the schema cannot be read, or the value cannot be (see the module)."""
    import fastavro

    try:
        named: dict[str, Any] = {}
        parsed = fastavro.parse_schema(json.loads(text), named_schemas=named)
        read = _Compiler(named).reader(parsed)
    except RecursionError:
        raise poison(PoisonReason.UNDECODABLE_VALUE, "the Avro schema nests too deeply to be read", schema_id) from None
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as exc:
        raise poison(PoisonReason.UNDECODABLE_VALUE, f"the Avro schema cannot be read: {exc}", schema_id) from None

    def document(payload: bytes, max_json_bytes: int) -> Any:
        s = _Input(payload, max_json_bytes)
        try:
            value = read(s)
            if s.left < 0:
                raise _TooLarge
        except _TooLarge:
            raise poison(PoisonReason.TOO_LARGE, f"the Avro value decodes to more than {max_json_bytes} bytes of"
                         " JSON (stopped while reading)", schema_id) from None
        except _TooDeep:
            raise poison(PoisonReason.UNDECODABLE_VALUE, f"the Avro value nests deeper than {MAX_DECODED_DEPTH}"
                         " records, arrays and maps", schema_id) from None
        except (IndexError, struct.error):
            raise poison(PoisonReason.UNDECODABLE_VALUE, "not an Avro value of this schema: cut short",
                         schema_id) from None
        except _Bad as exc:
            raise poison(PoisonReason.UNDECODABLE_VALUE, f"not an Avro value of this schema: {exc}", schema_id) from None
        except (ValueError, OverflowError, TypeError) as exc:  # invalid UTF-8; a logical value out of range
            raise poison(PoisonReason.UNDECODABLE_VALUE,
                         f"not an Avro value of this schema: {type(exc).__name__}: {exc}", schema_id) from None
        rest = len(payload) - s.pos
        if rest:
            raise poison(PoisonReason.UNDECODABLE_VALUE, f"{rest} bytes after the Avro value", schema_id)
        return value

    return document
