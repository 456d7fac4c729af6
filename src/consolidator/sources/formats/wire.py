"""The two registries' wire formats: the frame in front of the encoded value.

- Confluent: magic byte ``0``, the schema id as a 4-byte big-endian integer, then (Protobuf
  only) the message indexes, a zigzag-varint count followed by as many zigzag varints (a
  single ``0`` byte means ``[0]``, the file's first message), then the encoded value.
- AWS Glue Schema Registry: header version byte ``3``, a compression byte (``0`` none, ``5``
  zlib), the schema version id as 16 bytes (a UUID), then the encoded value, zlib-compressed
  when the compression byte says so.

Every malformed frame raises ``bad_wire_format`` poison.
"""

from __future__ import annotations

import uuid
import zlib
from typing import NamedTuple

from consolidator.rules.events import PoisonReason
from consolidator.sources.formats.base import poison

CONFLUENT_MAGIC = 0
GLUE_HEADER_VERSION = 3
GLUE_COMPRESSION_NONE = 0
GLUE_COMPRESSION_ZLIB = 5
MAX_MESSAGE_INDEXES = 64  # nesting depth of a Protobuf message; more is not a real frame


class Frame(NamedTuple):
    schema_id: str  # the registry's id: a decimal integer (Confluent) or a UUID (Glue)
    payload: bytes  # the encoded value, decompressed
    message_indexes: tuple[int, ...] = ()  # Protobuf: the path of the message in its file


def confluent_frame(value: bytes, protobuf: bool = False) -> Frame:
    """Split a Confluent-framed value; ``protobuf`` reads the message indexes too."""
    if len(value) < 5 or value[0] != CONFLUENT_MAGIC:
        first = f"first byte {value[0]}" if value else "no bytes"
        raise poison(PoisonReason.BAD_WIRE_FORMAT,
                     f"not the Confluent wire format (magic byte 0 and a 4-byte schema id; {first},"
                     f" {len(value)} bytes)")
    schema_id = str(int.from_bytes(value[1:5], "big"))
    if not protobuf:
        return Frame(schema_id, value[5:])
    position = 5
    count, position = _zigzag(value, position, schema_id)
    if count == 0:
        return Frame(schema_id, value[position:], (0,))
    if not 0 < count <= MAX_MESSAGE_INDEXES:
        raise poison(PoisonReason.BAD_WIRE_FORMAT, f"message index count {count} is out of range", schema_id)
    indexes = []
    for _ in range(count):
        index, position = _zigzag(value, position, schema_id)
        if index < 0:
            raise poison(PoisonReason.BAD_WIRE_FORMAT, f"negative message index {index}", schema_id)
        indexes.append(index)
    return Frame(schema_id, value[position:], tuple(indexes))


def _zigzag(value: bytes, position: int, schema_id: str) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= len(value) or shift > 63:
            raise poison(PoisonReason.BAD_WIRE_FORMAT, "message indexes are cut short or too long", schema_id)
        byte = value[position]
        position += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), position


def glue_frame(value: bytes, max_bytes: int) -> Frame:
    """Split a Glue-framed value and decompress it, to at most ``max_bytes`` (the event size
    cap: a small compressed value cannot expand past it)."""
    if len(value) < 18 or value[0] != GLUE_HEADER_VERSION:
        first = f"first byte {value[0]}" if value else "no bytes"
        raise poison(PoisonReason.BAD_WIRE_FORMAT,
                     f"not the Glue Schema Registry wire format (header version 3, compression, 16-byte"
                     f" schema version id; {first}, {len(value)} bytes)")
    schema_id = str(uuid.UUID(bytes=bytes(value[2:18])))
    compression, payload = value[1], value[18:]
    if compression == GLUE_COMPRESSION_NONE:
        return Frame(schema_id, payload)
    if compression != GLUE_COMPRESSION_ZLIB:
        raise poison(PoisonReason.BAD_WIRE_FORMAT, f"unknown compression byte {compression}", schema_id)
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(payload, max_bytes + 1)
    except zlib.error as exc:
        raise poison(PoisonReason.UNDECODABLE_VALUE, f"zlib: {exc}", schema_id) from None
    if len(data) > max_bytes:
        raise poison(PoisonReason.TOO_LARGE, f"value decompresses to more than {max_bytes} bytes", schema_id)
    if not inflater.eof:
        raise poison(PoisonReason.UNDECODABLE_VALUE, "zlib stream is cut short", schema_id)
    return Frame(schema_id, data)
