"""File sink: JSON lines, relative and absolute URLs, failures reported per batch."""

from __future__ import annotations

from consolidator.sinks import OutgoingBatch, sink_from_url
from consolidator.sinks.file import FileSink


def test_relative_url_writes_json_lines(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sink = sink_from_url("file://./out/batches.jsonl")
    assert isinstance(sink, FileSink)
    assert sink.publish([OutgoingBatch("a" * 32, "WH-1", b'{"n":1}'), OutgoingBatch("b" * 32, "WH-2", b'{"n":2}')]) == {}
    assert (tmp_path / "out/batches.jsonl").read_text() == '{"n":1}\n{"n":2}\n'
    assert sink_from_url(f"file://{tmp_path}/out/batches.jsonl").read() == [{"n": 1}, {"n": 2}]


def test_unwritable_path_fails_every_batch(tmp_path):
    (tmp_path / "blocker").write_text("a file, not a directory")
    sink = FileSink(tmp_path / "blocker" / "batches.jsonl")
    errors = sink.publish([OutgoingBatch("a" * 32, "WH-1", b"{}"), OutgoingBatch("b" * 32, "WH-1", b"{}")])
    assert sorted(errors) == [0, 1]


def test_a_message_over_the_limit_is_refused_before_writing_and_the_others_are_written(tmp_path):
    sink = FileSink(tmp_path / "out.jsonl", max_message_bytes=50)
    small, large = b'{"batch_id":"a"}', b'{"batch_id":"b","pad":"' + b"x" * 60 + b'"}'
    errors = sink.publish([OutgoingBatch("b", "g", large), OutgoingBatch("a", "g", small)])
    assert list(errors) == [0] and "over the 50-byte limit" in errors[0]
    assert sink.read() == [{"batch_id": "a"}]
