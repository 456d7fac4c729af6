"""A claim the byte cap splits reads each of its rows once: the rows read
with their items grow linearly with the claim, not quadratically, and the batches are the ones
:func:`consolidator.rules.split.split_to_fit` makes of the whole claim."""

from __future__ import annotations

import pymysql
import pytest
from support import record
from test_flush import POLICY, RecordingSink, ingest, make_service

from consolidator.rules.policy import FlushReason, Policy
from consolidator.rules.split import split_to_fit
from consolidator.services.flush import FlushService

KIB = 1024


@pytest.fixture
def item_rows_read(monkeypatch):
    """Counts the rows every item-reading query on ``buffer_rows`` returns (a driver hook: any
    SELECT of the ``items`` column by any cursor class)."""
    counted = {"rows": 0}
    execute, fetchall = pymysql.cursors.Cursor.execute, pymysql.cursors.Cursor.fetchall

    def counting_execute(self, query, args=None):
        text = query if isinstance(query, str) else query.decode()
        self._reads_items = text.lstrip().upper().startswith("SELECT") and "items" in text and "buffer_rows" in text
        return execute(self, query, args)

    def counting_fetchall(self):
        rows = fetchall(self)
        if getattr(self, "_reads_items", False):
            counted["rows"] += len(rows)
        return rows

    monkeypatch.setattr(pymysql.cursors.Cursor, "execute", counting_execute)
    monkeypatch.setattr(pymysql.cursors.Cursor, "fetchall", counting_fetchall)
    return counted


def big_orders(n: int, start: int = 0, skus: int = 40):
    """Orders of one group, each ~1.7 KB in a message: a 2 KB cap makes each its own batch."""
    return [record(i, location="WH-1", order=f"O{i}", key=b"WH-1",
                   items=tuple((f"SKU-{i}-{k:03d}", 1) for k in range(skus))) for i in range(start, start + n)]


def flush_once(store, clock, tmp_path, n: int, cap: int, start: int = 0) -> tuple[RecordingSink, FlushService]:
    """Ingest ``n`` big orders; the sink and a service whose next tick claims all of them at once."""
    policy = Policy(POLICY.debounce_ms, POLICY.hard_window_ms, max_batch_size=n,
                    tick_interval_ms=POLICY.tick_interval_ms, max_batch_bytes=cap)
    ingest(store, clock, big_orders(n, start))
    sink = RecordingSink(tmp_path / f"out-{n}.jsonl")
    return sink, make_service(store, sink, clock, tmp_path, policy=policy)


@pytest.mark.parametrize("n", [50, 100])
def test_a_split_claim_reads_each_row_once(store, clock, tmp_path, item_rows_read, n):
    _sink, service = flush_once(store, clock, tmp_path, n, 2 * KIB)
    item_rows_read["rows"] = 0
    report = service.tick()  # due: full (n >= max_batch_size)

    assert len(report.published) == n, "one batch per order under the 2 KB cap"
    assert {p.reason for p in report.published} == {FlushReason.FULL}
    # one row per batch taken; the boundary test reads at most one row ahead, carried to the next
    # batch, and the first page reads 2 rows: n + 1 at most (today's re-reads: n (n + 1) / 2)
    assert item_rows_read["rows"] <= n + 1, f"{item_rows_read['rows']} rows read for a claim of {n}"


def test_rows_read_grow_linearly_with_the_claim(store, clock, tmp_path, item_rows_read):
    reads = {}
    for n, start in ((40, 0), (80, 40)):
        _sink, service = flush_once(store, clock, tmp_path, n, 2 * KIB, start)
        item_rows_read["rows"] = 0
        service.tick()
        reads[n] = item_rows_read["rows"]
        assert store.row_counts().get("PENDING", 0) == 0
    assert reads[80] <= 2 * reads[40] + 2, reads


@pytest.mark.parametrize("cap", [3 * KIB, 9 * KIB, 40 * KIB])
def test_split_claims_are_the_batches_split_to_fit_makes_of_the_whole_claim(store, clock, tmp_path, cap):
    n = 60
    sink, service = flush_once(store, clock, tmp_path, n, cap)
    service.tick()
    sent = sink.messages()
    assert sum(len(m["members"]) for m in sent) == n
    claimed = [m.position for m in _claim_order(store)]
    expected = split_to_fit("WH-1", _claim_order(store), FlushReason.FULL, clock.now_ms(), cap)
    assert [[(p["topic"], p["partition"], p["offset"]) for p in m["members"]] for m in sent] == [
        sorted(tuple(m.position) for m in batch) for batch in expected]
    assert len(claimed) == n and len(sent) > 1


def _claim_order(store):
    """The rows of WH-1 as members, in claim order (first seen, position)."""
    from consolidator.store.batches import _member

    with store.transaction() as cur:
        cur.execute("SELECT src_topic, src_partition, src_offset, item_id, items, first_seen_ms, last_update_ms,"
                    " merged_events, record_ts_ms FROM buffer_rows WHERE group_key = 'WH-1'"
                    " ORDER BY first_seen_ms, pos_key")
        return [_member(r) for r in cur.fetchall()]


def test_a_split_claim_continues_in_claim_order_across_topics_and_partitions(store, clock, tmp_path):
    """Rows of one group from several topics (one a prefix of another, one not ASCII) and
    partitions: their claim order is first seen, then position key; the pages of a split claim
    continue after the last row read (here a row of the non-ASCII topic), each row taken once,
    in that order."""
    n, cap = 36, 4 * KIB
    places = [(topic, partition) for topic in ("ördérs", "a", "a-b") for partition in (0, 7, 2**31 - 1)]
    records = [record(10**(3 * (i // len(places))) + i, location="WH-1", order=f"O{i}", key=b"WH-1", topic=topic,
                      partition=partition, items=tuple((f"SKU-{i}-{k:03d}", 1) for k in range(40)))
               for i, (topic, partition) in enumerate(places * (n // len(places)))]
    policy = Policy(POLICY.debounce_ms, POLICY.hard_window_ms, max_batch_size=n,
                    tick_interval_ms=POLICY.tick_interval_ms, max_batch_bytes=cap)
    first = [r for r in records if r.topic == "ördérs"]
    assert ingest(store, clock, first) == len(first)  # first seen first: the claim's first page is theirs
    clock.advance(1000)
    assert ingest(store, clock, [r for r in records if r.topic != "ördérs"]) == n - len(first)
    sink = RecordingSink(tmp_path / "out.jsonl")
    expected = split_to_fit("WH-1", _claim_order(store), FlushReason.FULL, clock.now_ms(), cap)
    make_service(store, sink, clock, tmp_path, policy=policy).tick()
    assert [[(p["topic"], p["partition"], p["offset"]) for p in m["members"]] for m in sink.messages()] == [
        sorted(tuple(m.position) for m in batch) for batch in expected]
    assert len(expected) > 3 and store.row_counts() == {"SENT": n}
