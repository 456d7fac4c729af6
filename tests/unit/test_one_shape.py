"""The event shape rides on one object: the field names. The flush builds its messages with the
shape and event times of the names ingest reads events with; the policy carries neither."""

from __future__ import annotations

import dataclasses

from consolidator.rules.policy import Policy
from consolidator.services.flush_setup import build_flush_service
from consolidator.services.ingest import build_ingest_service
from consolidator.settings import FlushSettings, IngestSettings, load_settings


def test_the_policy_carries_no_event_shape():
    assert {f.name for f in dataclasses.fields(Policy)}.isdisjoint({"shape", "event_times"})


def test_the_flush_takes_the_shape_and_event_times_ingest_reads_with(tmp_path):
    environ = {"CONSOLIDATOR_DATABASE_URL": "mysql://root@127.0.0.1:1/none",  # never reached
               "CONSOLIDATOR_SINK_URL": f"file://{tmp_path / 'out.jsonl'}",
               "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{tmp_path / 'dead.jsonl'}",
               "CONSOLIDATOR_REDIS_URL": "redis://127.0.0.1:1/0", "CONSOLIDATOR_GROUP_KEY_FIELD": "tenant",
               "CONSOLIDATOR_AGGREGATE": '[{"name": "n", "op": "count"}]', "CONSOLIDATOR_MEMBER_PAYLOAD": "full",
               "CONSOLIDATOR_EVENT_TIME_FIELD": "meta.at"}
    ingest = build_ingest_service(load_settings(IngestSettings, environ=environ))
    flush = build_flush_service(load_settings(FlushSettings, environ=environ))
    assert not flush.names.shape.is_reference and flush.names.event_times
    assert flush.names == ingest.names
