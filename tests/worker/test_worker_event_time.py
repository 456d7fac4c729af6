"""The worker reads ``CONSOLIDATOR_EVENT_TIME_FIELD`` as the Lambda path does: the event's own
time is the row's time (TTL, month, batch times), and a value without one is poison naming it."""

from __future__ import annotations

import json
from pathlib import Path

from support import sql
from worker_support import running, wait_for

STAMP = 1_795_860_000_000  # 2026-11-28T10:00:00Z


def test_the_worker_stores_each_events_own_time_and_dead_letters_a_missing_one(kafka, topic, worker_env, store,
                                                                                tmp_path: Path):
    def value(n: int) -> bytes:
        event = {"location_id": "C-1", "order_id": f"n{n}", "items": []}
        if n != 2:
            event["ts"] = "2026-11-28T10:00:00Z" if n % 2 else STAMP + n
        return json.dumps(event).encode()

    kafka.produce(topic, 0, 4, partition=0, values=value)
    env = {**worker_env, "CONSOLIDATOR_EVENT_TIME_FIELD": "ts"}
    with running(env, role="ingest"):
        group = env["CONSOLIDATOR_KAFKA_GROUP_ID"]
        wait_for(lambda: kafka.committed(group, topic).get(0) == 4, 20, "partition 0 committed to its end")
    rows = sql(store, "SELECT item_id, record_ts_ms FROM buffer_rows ORDER BY item_id")
    assert [(r["item_id"], r["record_ts_ms"]) for r in rows] == [("n0", STAMP), ("n1", STAMP), ("n3", STAMP)]
    (entry,) = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert (entry["reason"], entry["source"]["offset"]) == ("bad_event_time", 2) and "'ts' is missing" in entry["detail"]
