"""Reading a claim's rows in pages, each row once, however often the byte cap splits the claim.

A claim takes up to ``max_batch_size`` PENDING rows of a group, oldest first; the byte cap splits
it into consecutive batches (:func:`~consolidator.rules.split.fit_count`). Each batch is claimed in its
own transaction. Rows are read in pages bounded by bytes, under ``FOR UPDATE SKIP LOCKED``, only
as far as the next batch's boundary needs (at most twice the rows it takes); the rows read and
not taken stay in the :class:`ClaimCursor` for the next batch of the same claim, which reads on
after the last row read instead of reading the remainder again.

Between two batches the carried rows are not locked: the next transaction locks them again and
checks that each is still PENDING with the same ``merged_events`` (every ingest that touches a
row raises it). Should any differ (a concurrent ingest merged an event into it, or another
flusher took it), the carry is dropped and the claim reads again from its first PENDING row, as
a claim without a carry would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import pymysql

from consolidator.rules.batch import Member
from consolidator.rules.events import SourcePosition
from consolidator.rules.policy import FlushReason
from consolidator.rules.shape import stored_items
from consolidator.rules.split import PLAIN, MessageOptions, bounded_prefix, fit_count, prefix_fits
from consolidator.rules.tracecontext import TraceContext

# The claim's hot read (one per row flushed): the numbers in one text field, read by a tuple
# cursor. The driver decodes each field in Python, so 4 fields instead of 14 cut its work by
# more than two thirds. The position key is not read: it is the position's ``sort_key()`` (what
# ingest writes, store/buffer.py), computed for the one row a page continues after. The row's
# trace context (schema 12) ends the same text: CONCAT_WS skips a NULL, so a row without one
# reads exactly the 8 numbers, and its ``traceparent`` (no space in it) and its ``tracestate``
# (the rest, spaces and all; an empty one still leaves its separator) follow otherwise.
_CLAIM_COLUMNS = ("CONCAT_WS(' ', id, bucket, src_partition, src_offset, first_seen_ms, last_update_ms,"
                  " merged_events, record_ts_ms, trace_parent, IF(trace_parent IS NULL, NULL, trace_state)),"
                  " src_topic, item_id, items")
_position, _make_member = SourcePosition._make, Member._make
PAGE_BYTES_MIN = 1 << 20  # a page of rows holds about max(2 x the byte cap, this) stored bytes
FIRST_PAGE_ROWS = 2  # what the first boundary test needs; later pages are sized by the bytes seen


class ReadRow(NamedTuple):
    key: str  # "id,bucket": the primary key as a text of integers
    merged_events: int  # the row's version: every ingest that touches the row raises it
    stored_bytes: int
    member: Member
    trace: TraceContext | None = None  # the trace context of the row's newest event, if it had one


@dataclass
class ClaimCursor:
    """One claim of a group: the rows it may still take and those read but not taken yet.
    Owned by one flusher for one claim; not reusable after a claim raised."""

    group_key: str
    rows_left: int  # rows the claim may still take (it starts at ``max_batch_size``)
    carry: list[ReadRow] = field(default_factory=list)  # read, not taken, in claim order
    after: tuple[int, bytes] | None = None  # claim order of the last row read
    exhausted: bool = False  # the last page came back short: no more PENDING rows to read


def read_claim_rows(rows: Sequence[tuple]) -> list[ReadRow]:
    """The rows of a claim page (``_CLAIM_COLUMNS``, as tuples)."""
    read = []
    for numbers, topic, item_id, items in rows:
        fields = numbers.split(" ", 9)
        trace = None
        if len(fields) > 8:  # the row has a trace context
            trace = TraceContext(fields[8], fields[9] if len(fields) > 9 else None)
            del fields[8:]
        id_, bucket, partition, offset, first, last, merged, ts = map(int, fields)
        member = _make_member((_position((topic, partition, offset)), item_id,
                               stored_items(items), first, last, merged, ts))
        read.append(ReadRow(f"{id_:d},{bucket:d}", merged, len(items) + len(item_id) + len(topic) + 64, member,
                            trace))
    return read


def trace_contexts(rows: Sequence[ReadRow]) -> tuple[TraceContext, ...]:
    """The trace contexts of ``rows`` that have one, in their order (claim order: batch order)."""
    return tuple(r.trace for r in rows if r.trace is not None)


class _Pages:
    """The claim's rows in claim order, read on demand inside one transaction."""

    def __init__(self, cur, cursor: ClaimCursor, expired_before_ms: int | None, max_bytes: int | None):
        self.cur, self.cursor = cur, cursor
        self.live = ("", ()) if expired_before_ms is None else (" AND record_ts_ms >= %s", (expired_before_ms,))
        self.page_bytes = PAGE_BYTES_MIN if max_bytes is None else max(PAGE_BYTES_MIN, 2 * max_bytes)

    def keep_carry(self) -> None:
        """Lock the carried rows again; drop the carry (read afresh) if any of them changed."""
        cursor = self.cursor
        if not cursor.carry:
            return
        self.cur.execute(
            "SELECT CONCAT(id, ',', bucket), merged_events FROM buffer_rows WHERE status = 'PENDING'"
            f" AND (id, bucket) IN ({','.join(f'({r.key})' for r in cursor.carry)}) FOR UPDATE SKIP LOCKED")
        if dict(self.cur.fetchall()) != {r.key: r.merged_events for r in cursor.carry}:
            cursor.carry, cursor.after, cursor.exhausted = [], None, False

    def have(self, wanted: int) -> int:
        """How many of the first ``wanted`` rows of the claim exist, reading pages as needed."""
        cursor = self.cursor
        wanted = min(wanted, cursor.rows_left)
        while len(cursor.carry) < wanted and not cursor.exhausted:
            room = cursor.rows_left - len(cursor.carry)
            self._read(min(room, max(wanted - len(cursor.carry), self._page_rows())))
        return min(wanted, len(cursor.carry))

    def _page_rows(self) -> int:
        carry = self.cursor.carry
        if not carry:
            return FIRST_PAGE_ROWS
        mean = sum(r.stored_bytes for r in carry) / len(carry)
        return max(1, int(self.page_bytes // mean))

    def _read(self, n: int) -> None:
        cursor = self.cursor
        where, args = self.live
        if cursor.after is not None:
            first, pos_key = cursor.after
            where += " AND first_seen_ms >= %s AND (first_seen_ms > %s OR pos_key > %s)"
            args += (first, first, pos_key)
        self.cur.execute(
            f"SELECT {_CLAIM_COLUMNS} FROM buffer_rows WHERE status = 'PENDING' AND group_key = %s{where}"
            " ORDER BY first_seen_ms, pos_key LIMIT %s FOR UPDATE SKIP LOCKED",
            (cursor.group_key, *args, n))
        rows = read_claim_rows(self.cur.fetchall())
        cursor.carry.extend(rows)
        if rows:
            last = rows[-1].member
            cursor.after = (last.first_seen_ms, last.position.sort_key())
        if len(rows) < n:
            cursor.exhausted = True


def next_batch(cur, cursor: ClaimCursor, reason: FlushReason, now_ms: int, max_bytes: int | None,
               expired_before_ms: int | None, options: MessageOptions = PLAIN) -> tuple[list[ReadRow], bool] | None:
    """The rows of the claim's next batch (taken off the cursor) and whether rows of the claim
    remain after it (``cut``); None when the group has no PENDING row left to take. Reads with
    a tuple cursor on ``cur``'s connection; locks what it reads until the transaction ends."""
    if cursor.rows_left <= 0:
        return None
    with cur.connection.cursor(pymysql.cursors.Cursor) as plain:  # tuples: no dict per row
        pages = _Pages(plain, cursor, expired_before_ms, max_bytes)
        pages.keep_carry()
        members = _Members(cursor)
        if max_bytes is None:
            taken = pages.have(cursor.rows_left)
        else:
            taken = fit_count(prefix_fits(cursor.group_key, members, reason, now_ms, max_bytes, options), pages.have)
        taken = bounded_prefix(members[:taken], options.shape) if taken else 0  # its sums stay within bounds
    if not taken:
        return None
    batch, cursor.carry = cursor.carry[:taken], cursor.carry[taken:]
    cursor.rows_left -= taken
    return batch, bool(cursor.carry)


class _Members(Sequence[Member]):
    """The members of the cursor's carried rows, as a sequence (slices are lists)."""

    def __init__(self, cursor: ClaimCursor):
        self.cursor = cursor

    def __len__(self) -> int:
        return len(self.cursor.carry)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [r.member for r in self.cursor.carry[index]]
        return self.cursor.carry[index].member
