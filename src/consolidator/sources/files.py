"""A local file of events, read as the Kafka records the ingest service takes.

Three shapes of file (:class:`FileFormat`), told apart by their first non-blank line unless
the caller names one:

- ``values``: JSON lines, each line one event value (what a producer would put in a Kafka
  message). Positions come from the file, so the same file always gives the same records and
  a second run is a replay: topic ``file.<file name without extension>`` (or the caller's),
  partition 0, **offset = line number** (1-based; blank lines keep their number). The record
  timestamp is the time the line is read, or the value's ``timestamp_field`` (a path; epoch
  milliseconds or ISO-8601 with a zone, :mod:`consolidator.rules.event_time`). The value is the line's bytes, untouched: a line that is not JSON
  or not a JSON object is a poison value (``not_json``, ``not_object``) like any other, for the
  ingest service to dead-letter, with ``timestamp_field`` or without;
- ``envelope``: JSON lines of Kafka records, ``topic``, ``partition``, ``offset``,
  ``timestamp`` (epoch ms), ``key`` and ``value`` (text; a JSON object or array is taken as its
  compact JSON), or ``key_b64`` / ``value_b64`` for any bytes: the ``spark replay`` input;
- ``msk-event``: one MSK event document (the ``events/`` samples), read by
  :func:`consolidator.sources.msk.parse_event`.

Guarantees: reading never raises for bad content (JSON nested too deeply to read included). A
line whose envelope cannot become a record (not JSON, not an object, a missing or malformed
field), or a JSON object whose ``timestamp_field`` is missing or unreadable, is a
:class:`Malformed` item carrying its line number; the lines after it are read as usual. Nothing
here decodes an event value: that is the ingest service's job.
"""

from __future__ import annotations

import binascii
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from consolidator.rules.event_time import event_time_ms
from consolidator.rules.events import KafkaRecord
from consolidator.rules.printable import echoed
from consolidator.rules.shape_spec import parse_path
from consolidator.sources.msk import (
    MAX_OFFSET,
    MAX_PARTITION,
    MAX_TIMESTAMP_MS,
    TOPIC,
    ParsedEvent,
    parse_event,
)

ENVELOPE_FIELDS = ("topic", "partition", "offset")


class FileFormat(StrEnum):
    VALUES = "values"
    ENVELOPE = "envelope"
    MSK_EVENT = "msk-event"


@dataclass(frozen=True)
class Malformed:
    """A line that is not a usable record; ``line`` is 1-based."""

    line: int
    detail: str


class BadFile(ValueError):
    """The file as a whole cannot be read in the format asked for (the message says why)."""


def topic_for(path: Path) -> str:
    """``file.<stem>``, with every character Kafka does not allow in a topic name as ``-``."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", path.name.split(".")[0] or "events")
    return f"file.{stem}"[:249]


def detect(path: Path) -> FileFormat:
    """The format of ``path`` from its first non-blank line: a JSON object with ``topic``,
    ``partition`` and ``offset`` is an envelope; a first line that is not JSON on its own but a
    file that is one JSON document with ``eventSource`` is an MSK event; anything else is values."""
    with path.open("rb") as handle:
        first = next((line for line in handle if line.strip()), b"")
    try:
        document = parse_json(first)
    except ValueError:
        document = None
    if isinstance(document, dict):
        if all(name in document for name in ENVELOPE_FIELDS):
            return FileFormat.ENVELOPE
        if "eventSource" in document:
            return FileFormat.MSK_EVENT
        return FileFormat.VALUES
    if first.strip() in (b"{", b"{\n") or first.lstrip().startswith(b'{"eventSource"'):
        try:
            whole = parse_json(path.read_bytes())
        except ValueError:
            return FileFormat.VALUES
        if isinstance(whole, dict) and "eventSource" in whole:
            return FileFormat.MSK_EVENT
    return FileFormat.VALUES


def parse_json(text: bytes | str) -> object:
    """``text`` as JSON; ``ValueError`` (never ``RecursionError``) when it is not JSON or is nested
    too deeply to read."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def numbered(lines: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line without surrounding white space), blank lines left out."""
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped:
            yield number, stripped


def timestamp_of(document: object, field: str) -> int:
    """The value's ``field`` (a path like ``ts`` or ``meta.ts``) as epoch milliseconds, by the one
    event time rule (:mod:`consolidator.rules.event_time`); raises ``ValueError`` naming the problem."""
    return event_time_ms(document, parse_path(field))


def read_values(lines: Iterable[tuple[int, bytes]], topic: str, now_ms: Callable[[], int],
                timestamp_field: str | None = None) -> Iterator[tuple[int, KafkaRecord | Malformed]]:
    """Each line a value at (``topic``, 0, line number); see the module docstring. With
    ``timestamp_field``, a value that is not a JSON object is stamped when read, like any value
    without the flag: it is poison for the ingest service either way."""
    for number, line in lines:
        stamp = None
        if timestamp_field is not None:
            try:
                document = parse_json(line)
            except ValueError:
                document = None  # not JSON: poison (not_json), whatever its timestamp
            if isinstance(document, dict):
                try:
                    stamp = timestamp_of(document, timestamp_field)
                except ValueError as exc:
                    yield number, Malformed(number, f"--timestamp-field: {exc}")
                    continue
        yield number, KafkaRecord(topic, 0, number, now_ms() if stamp is None else stamp, None, line)


def _bytes(document: dict, name: str) -> bytes | None:
    encoded = document.get(f"{name}_b64")
    if encoded is not None:
        if type(encoded) is not str:
            raise ValueError(f"{name}_b64 must be a base64 string, got {type(encoded).__name__}")
        try:
            return binascii.a2b_base64(encoded, strict_mode=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"{name}_b64 is not base64: {exc}") from None
    value = document.get(name)
    if value is None:
        return None
    if type(value) is str:
        return value.encode()
    if type(value) in (dict, list):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    raise ValueError(f"{name} must be text, a JSON object or array, or null; got {type(value).__name__}")


def _int(document: dict, name: str, high: int) -> int:
    value = document.get(name)
    if type(value) is not int:  # bool is an int subclass and never a position
        raise ValueError(f"{name} must be an integer, got {type(value).__name__}")
    if not 0 <= value <= high:
        raise ValueError(f"{name} {value} is outside [0, {high}]")
    return value


def envelope_record(document: object) -> KafkaRecord:
    """One envelope line's record; raises ``ValueError`` naming every problem at once."""
    if type(document) is not dict:
        raise ValueError(f"an envelope line must be a JSON object, got {type(document).__name__}")
    problems: list[str] = []
    parts: dict[str, object] = {}
    topic = document.get("topic")
    if type(topic) is not str or not TOPIC.fullmatch(topic):
        problems.append(f"topic must be a Kafka topic name, got {echoed(topic)}")
    for name, read in (("partition", lambda: _int(document, "partition", MAX_PARTITION)),
                       ("offset", lambda: _int(document, "offset", MAX_OFFSET)),
                       ("timestamp", lambda: _int(document, "timestamp", MAX_TIMESTAMP_MS)),
                       ("key", lambda: _bytes(document, "key")),
                       ("value", lambda: _bytes(document, "value"))):
        try:
            parts[name] = read()
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise ValueError("; ".join(problems))
    return KafkaRecord(topic, parts["partition"], parts["offset"], parts["timestamp"], parts["key"], parts["value"])


def read_envelopes(lines: Iterable[tuple[int, bytes]]) -> Iterator[tuple[int, KafkaRecord | Malformed]]:
    """Each line a Kafka record in the ``spark replay`` input shape (module docstring)."""
    for number, line in lines:
        try:
            yield number, envelope_record(parse_json(line))
        except ValueError as exc:  # JSONDecodeError included
            detail = f"not JSON: {exc}" if isinstance(exc, json.JSONDecodeError) else str(exc)
            yield number, Malformed(number, detail)


def read_msk_event(path: Path) -> ParsedEvent:
    """The records of one MSK event document, and the pieces of it that are not records."""
    try:
        document = parse_json(path.read_bytes())
    except ValueError as exc:
        raise BadFile(f"{path} is not one JSON document (an MSK event): {exc}") from None
    return parse_event(document)


def restamped(record: KafkaRecord, shift_ms: int) -> KafkaRecord:
    """``record`` with its timestamp moved by ``shift_ms`` (kept within Kafka's range)."""
    return record._replace(timestamp_ms=min(MAX_TIMESTAMP_MS, max(0, record.timestamp_ms + shift_ms)))
