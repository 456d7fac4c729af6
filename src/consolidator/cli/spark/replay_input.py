"""What ``spark replay`` reads, checked and brought to the record shape before Spark starts.

The replay takes the files ``ingest --file`` takes (:class:`~consolidator.sources.files.FileFormat`:
plain values, envelopes of Kafka records, one MSK event; told by the first line unless
``--format`` names one; ``--timestamp-field`` for plain values), and Parquet record files or a
Kafka offset range as before.

Guarantees: a local file is read here, by the same readers as ``ingest --file``, and written as
envelope JSON lines (:func:`prepare`) that Spark reads; a line that is not a record is counted
and named (never silently dropped); an input that cannot be replayed raises :class:`Refused`
with one sentence, before any Spark session exists.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from consolidator.rules.clock import SystemClock
from consolidator.rules.events import KafkaRecord
from consolidator.rules.shape_spec import parse_path
from consolidator.sources.files import (
    BadFile,
    FileFormat,
    Malformed,
    detect,
    numbered,
    read_envelopes,
    read_msk_event,
    read_values,
    topic_for,
)

#: ``--format``: the file formats of ``ingest --file``, ``json`` (envelopes, also a directory or
#: a URL Spark reads itself), ``parquet`` and ``kafka``.
FORMATS = ("auto", *(str(f) for f in FileFormat), "json", "parquet", "kafka")


class Refused(ValueError):
    """The input cannot be replayed; the message says why in one sentence."""


@dataclass
class Prepared:
    """The records Spark reads: ``path`` in ``spark_format`` (``json``: envelopes, or
    ``parquet``); ``how`` says what was read; ``skipped``: lines that are not records."""

    path: str
    spark_format: str
    how: str
    records: int | None = None
    skipped: list[str] = field(default_factory=list)
    files: tuple[str, ...] | None = None  # the file the records were read from, when ``path`` is a copy


def choose(input_path: str | None, input_format: str, timestamp_field: str | None) -> str:
    """The format the input is read in (``auto`` resolved for a local file); :class:`Refused`
    when the options do not fit together or the file cannot be read at all."""
    if input_format not in FORMATS:
        raise Refused(f"--format is one of {', '.join(FORMATS)}, not {input_format!r}")
    if input_format == "kafka":
        if timestamp_field:
            raise Refused("--timestamp-field is for a file of plain values, not a Kafka topic")
        return input_format
    if not input_path:
        raise Refused("--input is required unless --format kafka")
    if timestamp_field is not None:
        try:
            parse_path(timestamp_field)
        except ValueError as exc:
            raise Refused(f"--timestamp-field: {exc}") from None
    local = "://" not in input_path
    path = Path(input_path)
    if local and not path.exists():
        raise Refused(f"{input_path} does not exist")
    chosen = input_format
    if chosen == "auto":
        chosen = str(_detect(path)) if local and path.is_file() else "json"
    if chosen in (str(FileFormat.VALUES), str(FileFormat.MSK_EVENT)) and not (local and path.is_file()):
        raise Refused(f"--format {chosen} reads one local file; {input_path} is not one")
    if timestamp_field and chosen != str(FileFormat.VALUES):
        raise Refused(f"--timestamp-field is for plain values; {input_path} is read as {chosen}")
    return chosen


def _detect(path: Path) -> FileFormat:
    try:
        return detect(path)
    except OSError as exc:
        raise Refused(f"cannot read {path}: {exc.strerror or exc}") from None


def prepare(input_path: str, chosen: str, timestamp_field: str | None, topic: str | None, work: Path) -> Prepared:
    """The input as Spark reads it: a local file of values, envelopes or one MSK event written
    to ``work`` as envelope JSON lines; anything else (a directory, a URL, Parquet) as it is."""
    path = Path(input_path)
    if chosen == "parquet" or (chosen in ("json", str(FileFormat.ENVELOPE)) and not ("://" not in input_path
                                                                                     and path.is_file())):
        return Prepared(input_path, "parquet" if chosen == "parquet" else "json", f"{chosen} {input_path}")
    fmt = FileFormat.ENVELOPE if chosen == "json" else FileFormat(chosen)
    work.mkdir(parents=True, exist_ok=True)
    target = work / "records.jsonl"
    prepared = Prepared(str(target), "json", f"{fmt} {input_path}", 0, files=(str(path.resolve()),))
    try:
        with target.open("w") as out:
            for item in _items(path, fmt, timestamp_field, topic):
                if isinstance(item, Malformed):
                    prepared.skipped.append(f"line {item.line}: {item.detail}" if item.line else item.detail)
                else:
                    out.write(_envelope(item) + "\n")
                    prepared.records += 1
    except (OSError, BadFile) as exc:
        raise Refused(f"cannot read {input_path}: {getattr(exc, 'strerror', None) or exc}") from None
    except UnicodeDecodeError as exc:
        raise Refused(f"cannot read {input_path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    if not prepared.records:
        first = f" ({prepared.skipped[0]})" if prepared.skipped else ""
        raise Refused(f"{input_path} holds no record to replay as {fmt}{first}")
    if fmt is FileFormat.VALUES and timestamp_field is None:
        prepared.how += " (stamped when read: every record arrives at once; --timestamp-field F reads their time)"
    return prepared


def _items(path: Path, fmt: FileFormat, timestamp_field: str | None,
           topic: str | None) -> Iterator[KafkaRecord | Malformed]:
    if fmt is FileFormat.MSK_EVENT:
        parsed = read_msk_event(path)
        yield from parsed.records
        for rejected in parsed.rejected:
            yield Malformed(0, f"{rejected.reason}: {rejected.detail}")
        return
    with path.open("rb") as handle:
        lines = numbered(handle)
        reader = (read_envelopes(lines) if fmt is FileFormat.ENVELOPE
                  else read_values(lines, topic or topic_for(path), SystemClock().now_ms, timestamp_field))
        for _, item in reader:
            yield item


def _envelope(record: KafkaRecord) -> str:
    line = {"topic": record.topic, "partition": record.partition, "offset": record.offset,
            "timestamp": record.timestamp_ms}
    if record.key is not None:
        line["key_b64"] = base64.b64encode(record.key).decode()
    if record.value is not None:
        line["value_b64"] = base64.b64encode(record.value).decode()
    return json.dumps(line)
