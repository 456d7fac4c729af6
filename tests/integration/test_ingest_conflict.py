"""A lock wait or deadlock is no record's fault: ingest does not halve the invocation to find a
failing record (each half would wait for the lock again) nor runs a transaction again after a
lock wait (it waited the server's whole timeout), it stores the partitions one by one,
and a partition that conflicts again is reported failed from its first record; the other
partitions are stored (docs/semantics.md section 4)."""

from __future__ import annotations

import pymysql
import pytest
from support import record, sql

from consolidator.rules.events import FieldNames
from consolidator.services.ingest import IngestService
from consolidator.sinks.deadletter import FileDeadLetter


# pipelined: its transaction meets the lock, then each partition alone; exact path only: the whole
# invocation meets it, then each partition alone
@pytest.mark.parametrize(("pipeline_rows", "exact_transactions"), [(250, [32, 32]), (0, [32, 32, 64])])
def test_a_partition_whose_mark_is_locked_fails_alone_after_one_wait_of_its_own(store, clock, tmp_path, pipeline_rows,
                                                                                exact_transactions):
    service = IngestService(store, FileDeadLetter(tmp_path / "dead.jsonl"), FieldNames(), 1024, clock,
                            pipeline_rows=pipeline_rows)
    service.ingest([record(0, partition=0), record(0, partition=1, order="B0")])  # both marks exist
    sql(store, "SET SESSION innodb_lock_wait_timeout = 1")  # the service's connection: waits end in 1 s
    transactions = []
    store._ingest_once = lambda events, *rest: (transactions.append(len(events)),
                                                type(store)._ingest_once(store, events, *rest))[1]
    params = store.params
    holder = pymysql.connect(host=params.host, port=params.port, user=params.user, password=params.password,
                             database=params.database, autocommit=False)
    try:
        holder.cursor().execute("SELECT * FROM partition_offsets FORCE INDEX (PRIMARY)"
                                " WHERE (src_topic, src_partition) = ('orders', 0) FOR UPDATE")  # that row only
        records = [record(o, partition=o % 2, order=f"O{o}") for o in range(2, 66)]
        outcome = service.ingest(records)
    finally:
        holder.rollback()
        holder.close()
    assert {(p.partition, p.offset) for p in outcome.failed} == {(0, o) for o in range(2, 66, 2)}
    stored = sql(store, "SELECT src_partition, src_offset FROM buffer_rows WHERE src_offset >= 2")
    assert sorted(r["src_offset"] for r in stored) == list(range(3, 66, 2))
    assert {r["src_partition"] for r in stored} == {1}
    # none run again after a lock wait (it waited the server's whole timeout): 2 lock waits, not
    # one per halving and retry
    assert sorted(transactions) == exact_transactions, transactions
