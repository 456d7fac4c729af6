"""The ingest upsert's row text, built with per-statement caches, is exactly the text of the plain
construction: every value escaped by pymysql's ``escape_string`` (or quotes doubled under
NO_BACKSLASH_ESCAPES) and the position key from ``SourcePosition.sort_key``."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from pymysql.constants import SERVER_STATUS
from pymysql.converters import escape_string

from consolidator.events import Event, SourcePosition, bucket_of
from consolidator.store.buffer import _UPSERT_HEAD, _UPSERT_TAIL, _upsert_statements

NOW = 1_795_000_000_000


def reference(events, now_ms: int, no_backslash: bool) -> list[str]:
    def esc(text):
        return text.replace("'", "''") if no_backslash else escape_string(text)

    rows = [f"({bucket_of(e.timestamp_ms)},'{esc(e.group_key)}','{esc(e.item_id)}',X'{e.position.sort_key().hex()}',"
            f"'{esc(e.position.topic)}',{e.position.partition},{e.position.offset},{e.timestamp_ms},"
            f"'{esc(orjson.dumps(e.items).decode())}',{now_ms},{now_ms})" for e in events]
    return [_UPSERT_HEAD + ", ".join(rows) + _UPSERT_TAIL] if rows else []


def cursor(no_backslash: bool):
    status = SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES if no_backslash else 0
    return SimpleNamespace(connection=SimpleNamespace(server_status=status))


texts = st.text(min_size=1, max_size=6) | st.sampled_from(["WH-1", "it's", "a\\b", "\x00\n\r\x1a\"", "é😀"])
events = st.builds(
    lambda topic, partition, offset, ts, group, item, items: Event(
        SourcePosition(topic, partition, offset), ts, group, item, tuple(items), b""),
    st.sampled_from(["orders", "o'r", "t\\x", "ünï"]), st.integers(-(2**31), 2**31 - 1) | st.integers(0, 3),
    st.integers(-(2**63), 2**63 - 1) | st.integers(0, 9), st.integers(0, 253_402_300_799_999),
    st.sampled_from(["WH-1", "WH-2"]) | texts, texts,
    st.lists(st.tuples(texts, st.integers(0, 2**63 - 1)), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(events, max_size=8), st.booleans())
def test_the_row_text_is_the_plain_construction(batch, no_backslash):
    assert list(_upsert_statements(cursor(no_backslash), batch, NOW)) == reference(batch, NOW, no_backslash)
