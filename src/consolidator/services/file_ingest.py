"""Ingest a local file of events through the same :class:`IngestService` the Lambda runs.

Guarantees:
- records get the positions :mod:`consolidator.sources.files` gives them (for plain values:
  offset = line number), so running the same file again is a replay and changes nothing,
  and a file that grew is ingested from its new lines on;
- every record goes through :meth:`IngestService.ingest`: decoding, poison reasons, the dead
  letter, coalescing and replay protection are exactly the Lambda path's;
- a malformed line is reported with its line number and the rest of the file is read; it is
  not dead-lettered (the file still holds it: fix the line and run the file again);
- every line is counted: stored (coalesced ones included), replayed, poison, malformed, failed
  or blank; ``replay_only`` says when every record was a replay of one already stored (the
  same file again, or another file whose positions, topic and line numbers, were used before);
- the file is fed in chunks of ``chunk`` records, each one ingest call (one transaction on the
  usual path). At the first chunk with a failed record (a dependency failure, e.g. the database
  went away) reading stops: what follows is not attempted, so a partition is never stored past
  a record that was not, and running the same command again continues where it stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from consolidator.rules.events import KafkaRecord, Rejected, SourcePosition
from consolidator.services.ingest import IngestService
from consolidator.sources.files import (
    FileFormat,
    Malformed,
    detect,
    numbered,
    read_envelopes,
    read_msk_event,
    read_values,
    restamped,
    topic_for,
)

CHUNK = 1000  # records per ingest call: one transaction, one multi-row statement per 250 rows


@dataclass
class FileIngestReport:
    """What happened to every line of the file. ``poison`` counts dead-lettered records."""

    file: str
    format: str
    topic: str | None = None  # values: the topic the positions use
    lines: int = 0  # lines read, blank ones included (records in an MSK event)
    blank: int = 0  # blank lines: no record, counted so that the counts add up to ``lines``
    stored: int = 0
    coalesced: int = 0
    replayed: int = 0
    poison: int = 0
    failed: int = 0
    malformed: list[dict] = field(default_factory=list)  # {line, detail}
    poison_lines: list[dict] = field(default_factory=list)  # {line, source, reason, detail}
    failed_lines: list[dict] = field(default_factory=list)  # {line, source}
    stopped_at_line: int | None = None  # reading stopped there after a failure
    replay_only: bool = False  # every record was a replay of one already stored: nothing new
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed and not self.malformed


def _blanks_counted(lines: Iterable[bytes], report: FileIngestReport) -> Iterator[bytes]:
    """``lines``, each blank one counted in ``report`` (``numbered`` leaves them out)."""
    for line in lines:
        if not line.strip():
            report.lines += 1
            report.blank += 1
        yield line


def _chunks(items: Iterator[tuple[int, KafkaRecord | Malformed]], size: int,
            report: FileIngestReport) -> Iterator[list[tuple[int, KafkaRecord]]]:
    chunk: list[tuple[int, KafkaRecord]] = []
    for number, item in items:
        report.lines += 1
        if isinstance(item, Malformed):
            report.malformed.append({"line": item.line, "detail": item.detail})
            continue
        chunk.append((number, item))
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def ingest_file(path: Path, service: IngestService, *, file_format: FileFormat | None = None,
                topic: str | None = None, timestamp_field: str | None = None, restamp: bool = False,
                chunk: int = CHUNK, on_chunk: Callable[[FileIngestReport], None] | None = None) -> FileIngestReport:
    """Read ``path`` (format detected unless given) and ingest it; ``on_chunk`` sees the report
    after every chunk (progress). ``restamp`` (envelopes, MSK events) shifts every timestamp by
    one constant so the first record is stamped now, keeping the gaps between records.
    Raises ``OSError`` when the file cannot be read and :class:`~consolidator.sources.files.BadFile`
    when it is not the format asked for."""
    started = time.monotonic()
    file_format = file_format or detect(path)
    report = FileIngestReport(file=str(path), format=str(file_format))
    rejected: list[Rejected] = []
    if file_format is FileFormat.MSK_EVENT:
        parsed = read_msk_event(path)
        items: Iterator[tuple[int, KafkaRecord | Malformed]] = iter(list(enumerate(parsed.records, start=1)))
        rejected = parsed.rejected
    else:
        handle = path.open("rb")
        lines = numbered(_blanks_counted(handle, report))
        if file_format is FileFormat.VALUES:
            report.topic = topic or topic_for(path)
            items = read_values(lines, report.topic, service.clock.now_ms, timestamp_field)
        else:
            items = read_envelopes(lines)
    shift: int | None = None if restamp else 0
    try:
        for part in _chunks(items, chunk, report):
            if shift is None:
                shift = service.clock.now_ms() - part[0][1].timestamp_ms
            records = [restamped(r, shift) if shift else r for _, r in part]
            outcome = service.ingest(records, rejected)
            rejected = []
            line_of = {r.position: number for number, r in part}
            report.stored += outcome.stored
            report.coalesced += outcome.coalesced
            report.replayed += outcome.replayed
            report.poison += outcome.dead_lettered
            report.poison_lines += [{"line": line_of.get(p), "source": p.as_dict(), "reason": reason, "detail": detail}
                                    for p, reason, detail in outcome.poison]
            if outcome.failed:
                report.failed += len(outcome.failed)
                report.failed_lines += [{"line": line_of.get(p), "source": p.as_dict()} for p in outcome.failed]
                report.stopped_at_line = min(_line(line_of, p) for p in outcome.failed)
                break
            if on_chunk is not None:
                report.seconds = time.monotonic() - started
                on_chunk(report)
        if rejected:  # an MSK event with no usable record: only its rejected pieces
            outcome = service.ingest([], rejected)
            report.poison += outcome.dead_lettered
            report.poison_lines += [{"line": None, "source": p.as_dict(), "reason": reason, "detail": detail}
                                    for p, reason, detail in outcome.poison]
    finally:
        if file_format is not FileFormat.MSK_EVENT:
            handle.close()
    report.replay_only = report.replayed > 0 and report.replayed == report.lines - report.blank
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _line(line_of: dict[SourcePosition, int], position: SourcePosition) -> int:
    return line_of.get(position, 0)
