"""A lock wait or deadlock is no record's fault: ingest does not halve the invocation to find a
failing record (each half would wait for the lock again) nor runs a transaction again after a
lock wait (it waited the server's whole timeout), it stores the partitions one by one,
and a partition that conflicts again is reported failed from its first record; the other
partitions are stored (docs/semantics.md section 4)."""

from __future__ import annotations

import pymysql
from support import record, sql

from consolidator.rules.events import FieldNames
from consolidator.services.ingest import IngestService
from consolidator.sinks.deadletter import FileDeadLetter


class Attempts:
    """The store, counting the transactions of the exact path."""

    def __init__(self, store):
        self.store, self.ingests = store, 0

    def __getattr__(self, name):
        return getattr(self.store, name)

    def ingest(self, *args):
        self.ingests += 1
        return self.store.ingest(*args)


def test_a_partition_whose_mark_is_locked_fails_alone_after_one_wait_of_its_own(store, clock, database_url, tmp_path):
    service = IngestService(Attempts(store), FileDeadLetter(tmp_path / "dead.jsonl"), FieldNames(), 1024, clock)
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
    # the whole invocation once, then each partition alone, none run again after a lock wait (it
    # waited the server's whole timeout): 2 lock waits, not one per halving and retry
    assert service.store.ingests == 3, service.store.ingests
    assert sorted(transactions) == [32, 32, 64], transactions
