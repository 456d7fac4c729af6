"""The items column the server stores is the JSON text of the event's items, byte for byte, with
and without NO_BACKSLASH_ESCAPES: the upsert escapes only the backslashes and quotes of that JSON
(``store.connection._json_escaper``), as the server reads it."""

from __future__ import annotations

import orjson
import pytest
from support import T0

from consolidator.rules.events import Event, SourcePosition
from consolidator.rules.shape import EventView, stored_items

AWKWARD = ["it's", "a\\b", "\\'", "''", "\\", "\\\\%_", "\\n", "\x00\n\r\t\x1a\x7f\"", "é😀\u2028", "%_", "\\0"]


@pytest.mark.parametrize("no_backslash", [False, True])
def test_awkward_items_are_stored_as_their_json_text(store, no_backslash):
    if no_backslash:
        with store.transaction() as cur:  # the session keeps it: the ingest runs on this connection
            cur.execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')")
    events = [Event(SourcePosition("t", 0, offset), T0, "G", f"I{offset}", items, b"{}") for offset, items in enumerate([
        EventView({"text": AWKWARD, **{word: [word, {word: 1.5}] for word in AWKWARD}}),
        tuple((word, index) for index, word in enumerate(AWKWARD)),
        EventView("\\" * 7 + "'" * 3),
    ], start=1)]
    assert store.ingest(events, T0).stored == 3
    with store.transaction() as cur:
        cur.execute("SELECT @@sql_mode AS mode")
        assert ("NO_BACKSLASH_ESCAPES" in cur.fetchone()["mode"]) is no_backslash
        cur.execute("SELECT items FROM buffer_rows ORDER BY src_offset")
        stored = [row["items"] for row in cur.fetchall()]
    assert stored == [orjson.dumps(e.items).decode() for e in events]
    assert [stored_items(text) for text in stored] == [e.items for e in events]
