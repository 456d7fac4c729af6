"""The ingest upsert's row text, built with per-statement caches, is exactly the text of the plain
construction: every value escaped by pymysql's ``escape_string`` (or quotes doubled under
NO_BACKSLASH_ESCAPES) but the items JSON, whose backslashes and quotes only are escaped, and the
position key from ``SourcePosition.sort_key``. The server reads that JSON literal back as the
JSON text, whatever it holds (a reference of MySQL's string literal rules below)."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from pymysql.constants import SERVER_STATUS
from pymysql.converters import escape_string

from consolidator.rules.events import Event, SourcePosition, bucket_of
from consolidator.rules.shape import EventView
from consolidator.rules.tracecontext import TraceContext
from consolidator.store.buffer import _UPSERT_HEAD, _UPSERT_TAIL, _upsert_statements
from consolidator.store.connection import _json_escaper

NOW = 1_795_000_000_000


def reference(events, now_ms: int, no_backslash: bool) -> list[str]:
    def esc(text):
        return text.replace("'", "''") if no_backslash else escape_string(text)

    def esc_json(text):
        return text.replace("'", "''") if no_backslash else text.replace("\\", "\\\\").replace("'", "\\'")

    def trace(context):
        if context is None:
            return "NULL,NULL"
        return f"'{esc(context.traceparent)}'," + ("NULL" if context.tracestate is None else f"'{esc(context.tracestate)}'")

    rows = [f"({bucket_of(e.timestamp_ms)},'{esc(e.group_key)}','{esc(e.item_id)}',X'{e.position.sort_key().hex()}',"
            f"'{esc(e.position.topic)}',{e.position.partition},{e.position.offset},{e.timestamp_ms},"
            f"'{esc_json(orjson.dumps(e.items).decode())}',{now_ms},{now_ms},{trace(e.trace)})" for e in events]
    return [_UPSERT_HEAD + ", ".join(rows) + _UPSERT_TAIL] if rows else []


def cursor(no_backslash: bool):
    status = SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES if no_backslash else 0
    return SimpleNamespace(connection=SimpleNamespace(server_status=status))


texts = st.text(min_size=1, max_size=6) | st.sampled_from(["WH-1", "it's", "a\\b", "\x00\n\r\x1a\"", "é😀"])
events = st.builds(
    lambda topic, partition, offset, ts, group, item, items, trace: Event(
        SourcePosition(topic, partition, offset), ts, group, item, tuple(items), b"", trace),
    st.sampled_from(["orders", "o'r", "t\\x", "ünï"]), st.integers(-(2**31), 2**31 - 1) | st.integers(0, 3),
    st.integers(-(2**63), 2**63 - 1) | st.integers(0, 9), st.integers(0, 253_402_300_799_999),
    st.sampled_from(["WH-1", "WH-2"]) | texts, texts,
    st.lists(st.tuples(texts, st.integers(0, 2**63 - 1)), max_size=2),
    st.none() | st.builds(TraceContext, st.just(f"00-{'a' * 32}-{'1' * 16}-01"),
                          st.none() | st.sampled_from(["rojo=1", "a=b,c=d", "x='y'\\z"])),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(events, max_size=8), st.booleans())
def test_the_row_text_is_the_plain_construction(batch, no_backslash):
    assert list(_upsert_statements(cursor(no_backslash), batch, NOW)) == reference(batch, NOW, no_backslash)


# -- the items literal reads back as the JSON text ------------------------------------------------

_BACKSLASH_ESCAPES = {"0": "\x00", "'": "'", '"': '"', "b": "\b", "n": "\n", "r": "\r", "t": "\t",
                      "Z": "\x1a", "\\": "\\", "%": "\\%", "_": "\\_"}


def server_reads(body: str, no_backslash: bool) -> str:
    """The value of the SQL literal ``'body'`` by MySQL's and MariaDB's rules: ``''`` is a quote,
    a lone quote would end the literal; without NO_BACKSLASH_ESCAPES, a backslash escapes the
    next character (``\\%`` and ``\\_`` stay two characters, an unknown escape is the character)."""
    out, i = [], 0
    while i < len(body):
        char = body[i]
        if char == "'":
            assert body[i + 1:i + 2] == "'", f"the literal ends early at {i}: {body!r}"
            out.append("'")
            i += 2
        elif char == "\\" and not no_backslash:
            assert i + 1 < len(body), "a trailing backslash escapes the closing quote"
            out.append(_BACKSLASH_ESCAPES.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(char)
            i += 1
    return "".join(out)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text() | st.sampled_from(["it's", "a\\b", "\\'", "''", "\\%_", "\x00\n\r\x1a\"", "é😀\u2028"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=8,
)


@settings(max_examples=500, deadline=None)
@given(json_values, st.booleans())
def test_the_items_literal_reads_back_as_the_json_text(value, no_backslash):
    text = orjson.dumps(EventView(value))
    assert server_reads(_json_escaper(cursor(no_backslash).connection)(text), no_backslash) == text.decode()
