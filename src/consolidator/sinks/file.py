"""JSON-lines file sink for local runs and the demo: one batch message per line."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from consolidator.sinks import OutgoingBatch


@dataclass
class FileSink:
    """Appends the encoded messages and fsyncs before confirming (all or nothing per call)."""

    path: Path

    def publish(self, batches: Sequence[OutgoingBatch]) -> dict[int, str]:
        if not batches:
            return {}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab") as out:
                out.write(b"".join(b.body + b"\n" for b in batches))
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            return {i: f"file sink: {exc}" for i in range(len(batches))}
        return {}

    def close(self) -> None:
        pass

    def read(self) -> list[dict]:
        """Every message written so far (for tests and the demo)."""
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line]
