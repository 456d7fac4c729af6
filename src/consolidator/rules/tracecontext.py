"""A record's W3C trace context (Trace Context Level 1): its ``traceparent`` and ``tracestate``
Kafka headers, as the producer wrote them.

Reading never raises and never makes a record poison: a missing, repeated or malformed
``traceparent`` means the record has no trace context (the record itself is ingested as usual),
and a ``tracestate`` is kept only beside a valid ``traceparent``, only when it is printable
ASCII within :data:`MAX_TRACESTATE_CHARS`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import NamedTuple

TRACEPARENT_HEADER = "traceparent"
TRACESTATE_HEADER = "tracestate"
TRACEPARENT_CHARS = 55  # version 00: "00-" 32 hex "-" 16 hex "-" 2 hex
MAX_TRACESTATE_CHARS = 512  # what W3C asks a vendor to propagate at least
# version (not ff), trace id (not all zeros), parent id (not all zeros), flags; lowercase hex.
# A future version may append fields after a dash; only the first 55 characters are read then.
_TRACEPARENT = re.compile(r"(?!ff)([0-9a-f]{2})-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
_TRACESTATE = re.compile(r"[\x20-\x7e]*")


class TraceContext(NamedTuple):
    """A valid W3C trace context: ``traceparent`` (version 00 form) and its ``tracestate`` (None: none)."""

    traceparent: str
    tracestate: str | None = None


def parse_traceparent(text: str) -> str | None:
    """``text`` as a version-00 ``traceparent`` when it is a valid one (a later version's
    first four fields are read as version 00 allows), else None."""
    if len(text) < TRACEPARENT_CHARS:
        return None
    match = _TRACEPARENT.match(text)
    if match is None:
        return None
    version = match.group(1)
    if version == "00" and len(text) != TRACEPARENT_CHARS:
        return None
    if version != "00" and len(text) > TRACEPARENT_CHARS and text[TRACEPARENT_CHARS] != "-":
        return None
    return text[:TRACEPARENT_CHARS]


def trace_context(headers: tuple[tuple[str, bytes], ...]) -> TraceContext | None:
    """The trace context of a record's ``headers``; None when it has none or it is not valid
    (exactly one ``traceparent`` header, ASCII, well-formed).

    The usual headers, one ``traceparent`` alone, take a short way with the same result: the
    records of one producer span carry the same value, so the last value read is remembered
    (a comparison of 55 bytes instead of a parse), and a version-00 value is checked as bytes
    (:data:`_TRACEPARENT_00`) before anything else is made of it."""
    if len(headers) == 1:
        name, value = headers[0]
        if name != TRACEPARENT_HEADER:
            return None
        return _parent_alone(value)
    return _trace_context(headers)


_TRACEPARENT_00 = re.compile(rb"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")  # fullmatch
_new = tuple.__new__  # builds a NamedTuple in C, without its Python-level __new__
_last: tuple[bytes, TraceContext | None] = (b"", None)  # the last traceparent value read alone, and its context


def _parent_alone(value: bytes) -> TraceContext | None:
    """The trace context of headers that are one ``traceparent`` of ``value``."""
    global _last
    last = _last
    if value == last[0]:
        return last[1]
    if _TRACEPARENT_00.fullmatch(value):  # ASCII, and a valid version 00 of exactly 55 characters
        context = _new(TraceContext, (value.decode("ascii"), None))
    else:
        context = _trace_context(((TRACEPARENT_HEADER, value),))
    _last = (value, context)  # one assignment: another thread sees the old pair or the new one
    return context


def _trace_context(headers: tuple[tuple[str, bytes], ...]) -> TraceContext | None:
    parents = [value for name, value in headers if name == TRACEPARENT_HEADER]
    if len(parents) != 1:
        return None
    try:
        parent = parse_traceparent(parents[0].decode("ascii"))
    except UnicodeDecodeError:
        return None
    if parent is None:
        return None
    states = [value for name, value in headers if name == TRACESTATE_HEADER]
    state = None
    if len(states) == 1 and len(states[0]) <= MAX_TRACESTATE_CHARS:
        try:
            text = states[0].decode("ascii")
        except UnicodeDecodeError:
            text = ""
        if text and _TRACESTATE.fullmatch(text):
            state = text
    return TraceContext(parent, state)


_SPAN_ID = re.compile(r"(?!0{16})[0-9a-f]{16}")


def publish_span_id(batch_id: str) -> str:
    """The span id of every publish of the batch ``batch_id``: its first 16 hex digits (a batch
    id is 32 lowercase hex digits; one that is not, or whose first 16 are all zeros, gives the
    first 16 hex digits of its SHA-256 instead, never all zeros). A function of the id only."""
    if _SPAN_ID.fullmatch(batch_id[:16]):
        return batch_id[:16]
    digest = hashlib.sha256(f"consolidator-publish-span\n{batch_id}".encode()).hexdigest()[:16]
    return digest if _SPAN_ID.fullmatch(digest) else "0000000000000001"


def batch_traceparent(batch_id: str, member_contexts: Iterable[TraceContext | None]) -> str | None:
    """The W3C ``traceparent`` a published batch carries: None when no member has a trace
    context; else version 00, the trace id and the trace flags of the first member context
    (batch order: what the publish span's parent is), and :func:`publish_span_id` of the batch.
    A function of the batch only, so every re-publish carries the same value."""
    for context in member_contexts:
        if context is not None:
            parent = parse_traceparent(context.traceparent)
            if parent is not None:
                _, trace_id, _, flags = parent.split("-")
                return f"00-{trace_id}-{publish_span_id(batch_id)}-{flags}"
    return None
