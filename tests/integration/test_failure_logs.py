"""Failures say which batch: one log line with the batch id, group, attempt
and the sink's error; librdkafka's own lines through the Python logger, not raw stderr."""

from __future__ import annotations

import logging

from test_flush import RecordingSink, ingest, make_service, orders

from consolidator.sinks import OutgoingBatch
from consolidator.sinks.kafka import KafkaSink


def test_a_publish_failure_names_batch_group_attempt_and_error_in_its_message(store, clock, tmp_path, caplog):
    sink = RecordingSink(tmp_path / "out.jsonl")
    sink.down = True
    ingest(store, clock, orders(3, groups=1))
    clock.advance(3_600_000)
    service = make_service(store, sink, clock, tmp_path)
    with caplog.at_level(logging.WARNING, logger="consolidator.services.flush"):
        report = service.tick()
    assert report.publish_failures == 1
    (claimed,) = store.batches_in_state("CLAIMED", 10)
    lines = [r.getMessage() for r in caplog.records if "publish failed" in r.getMessage()]
    assert lines == [(f"publish failed for batch {claimed['batch_id']} (group WH-0, attempt 1); it stays CLAIMED: "
                      "sink down (test)")]


def test_librdkafka_lines_go_through_the_python_logger_at_warning_and_above(caplog, capfd):
    """A sink pointed at a closed port: librdkafka reports the refused connection. It must
    arrive as a log record of consolidator.kafka.client, never as a raw ``%3|...`` stderr line."""
    sink = KafkaSink("127.0.0.1:1", "nowhere", flush_timeout_s=2.0)
    with caplog.at_level(logging.DEBUG, logger="consolidator.kafka.client"):
        errors = sink.publish([OutgoingBatch("0" * 32, "WH-1", b"{}")])
        sink.close()
    assert errors  # not delivered
    client = [r for r in caplog.records if r.name == "consolidator.kafka.client"]
    assert client, "no librdkafka line reached the Python logger"
    assert all(r.levelno >= logging.WARNING for r in client)
    assert "127.0.0.1:1" in " ".join(r.getMessage() for r in client)
    assert "|rdkafka#" not in capfd.readouterr().err
