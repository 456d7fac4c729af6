"""An event's own time, read from its value (``CONSOLIDATOR_EVENT_TIME_FIELD``, ``--timestamp-field``).

One rule for every path that reads it (ingest on Lambda, from a file or in the worker; the
Spark jobs; ``kafka produce`` and ``spark replay``): the value at the path is epoch
milliseconds (a JSON integer) or an ISO-8601 text with a zone (``Z`` or ``+hh:mm``), within
[0, :data:`MAX_EVENT_TIME_MS`]. Anything else (absent, null, another type, a text without a
zone, a time out of range) raises :class:`ValueError` naming the path and what it found.
Pure: no clock, no I/O.
"""

from __future__ import annotations

from datetime import datetime

from consolidator.rules.printable import echoed
from consolidator.rules.shape_spec import Path, show

MAX_EVENT_TIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, Kafka's and the buffer's last month


def _at(document: object, path: Path) -> object:
    value = document
    for depth, segment in enumerate(path):
        if type(value) is not dict:
            where = show(path[:depth]) or "the value"
            raise ValueError(f"{show(path)}: {where} is not a JSON object, so it has no event time")
        value = value.get(segment)
    return value


def event_time_ms(document: object, path: Path) -> int:
    """The event time at ``path`` of ``document`` (a parsed JSON value) as epoch milliseconds."""
    return parse_time(_at(document, path), show(path))


def parse_time(raw: object, shown: str) -> int:
    """``raw`` (the value found at ``shown``) as epoch milliseconds; see the module docstring."""
    if type(raw) is int:
        stamp = raw
    elif type(raw) is str:
        try:
            moment = datetime.fromisoformat(raw)
        except ValueError:
            raise ValueError(f"{shown!r} is {echoed(raw)}, not epoch milliseconds or ISO-8601") from None
        if moment.tzinfo is None:
            raise ValueError(f"{shown!r} is {echoed(raw)}: an ISO-8601 time needs a zone (Z or +hh:mm)")
        stamp = round(moment.timestamp() * 1000)
    elif raw is None:
        raise ValueError(f"{shown!r} is missing (expected epoch milliseconds or ISO-8601 with a zone)")
    else:
        raise ValueError(f"{shown!r} is a JSON {_kind(raw)}, not epoch milliseconds or ISO-8601 with a zone")
    if not 0 <= stamp <= MAX_EVENT_TIME_MS:
        raise ValueError(f"{shown!r} = {stamp} is outside [0, {MAX_EVENT_TIME_MS}] ms")
    return stamp


def _kind(value: object) -> str:
    return {dict: "object", list: "list", bool: "boolean", float: "number"}.get(type(value), type(value).__name__)
