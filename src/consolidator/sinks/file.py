"""JSON-lines file sink for local runs and the demo: one batch message per line.

A body is measured as it is written: the encoded message's bytes as they are (``measure_body``
is ``len``; a line holds no raw newline, the JSON encoder escapes it), the newline apart."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from consolidator.sinks import OutgoingBatch
from consolidator.support import jsonlines

MAX_MESSAGE_BYTES = 1_000_000  # like the Kafka sink's default, so local runs split as Kafka would


@dataclass
class FileSink:
    """Appends the encoded messages and fsyncs before confirming. Crash-atomic per line
    (:mod:`consolidator.support.jsonlines`): a flusher killed mid-write leaves no torn line a reader
    sees, and the next write cuts the torn tail off; its batches are still CLAIMED and are
    re-published."""

    path: Path
    max_message_bytes: int = MAX_MESSAGE_BYTES
    measure_body = staticmethod(len)  # the line is the encoded message as it is
    messaging_system = "file"  # the publish span's messaging.system (a line is the message: its traceparent field)

    @property
    def destination(self) -> str:
        return self.path.name

    def publish(self, batches: Sequence[OutgoingBatch]) -> dict[int, str]:
        """Write the batches within ``max_message_bytes``; a larger one is refused (not written),
        as the other sinks refuse theirs before sending."""
        errors = {i: f"file sink: message of {len(b.body)} bytes is over the {self.max_message_bytes}-byte limit"
                  for i, b in enumerate(batches) if self.measure_body(b.body) > self.max_message_bytes}
        sendable = [b for i, b in enumerate(batches) if i not in errors]
        if not sendable:
            return errors
        try:
            jsonlines.append(self.path, (b.body for b in sendable))
        except OSError as exc:
            return {i: f"file sink: {exc}" for i in range(len(batches))}
        return errors

    def close(self) -> None:
        pass

    def read(self) -> list[dict]:
        """Every complete message written so far (for tests and the demo)."""
        return jsonlines.read(self.path)
