"""``consolidator ingest --file F``: feed a local file of events through the real ingest service."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from consolidator.cli.base import (
    EXIT_FAILED,
    JsonOption,
    app,
    bounded,
    emit_json,
    err,
    guarded,
    load_settings,
    out,
    reads,
    say_error,
    topic_name,
)

if TYPE_CHECKING:
    from consolidator.services.file_ingest import FileIngestReport

FORMATS = ("auto", "values", "envelope", "msk-event")


def _counts(r: FileIngestReport) -> str:
    return (f"{r.stored} stored, {r.coalesced} coalesced, {r.replayed} replayed, {r.poison} poison, "
            f"{len(r.malformed)} malformed, {r.failed} failed" + (f", {r.blank} blank" if r.blank else ""))


class _Progress:
    """One stderr line every ``every`` lines or ``seconds``, whichever comes first."""

    def __init__(self, every: int, seconds: float) -> None:
        self.every, self.seconds = every, seconds
        self.next_lines, self.last = every, time.monotonic()

    def __call__(self, r: FileIngestReport) -> None:
        now = time.monotonic()
        if r.lines < self.next_lines and now - self.last < self.seconds:
            return
        self.next_lines = (r.lines // self.every + 1) * self.every
        self.last = now
        rate = r.lines / r.seconds if r.seconds > 0 else 0.0
        err.print(f"ingest {r.file}: {r.lines} lines read, {_counts(r)} ({rate:,.0f} lines/s)", soft_wrap=True)


def _replay_only(r: FileIngestReport) -> str:
    """Why a file changed nothing: every record's position was stored before."""
    if r.topic is None:
        return f"every record of {r.file} was already stored (their topic, partition and offset were seen before)"
    return (f"every line of {r.file} was already stored under topic {r.topic} (line number = offset), so this run"
            " was a replay and ingested nothing. If this is another file than the one ingested before, give it a"
            " topic of its own: --topic NAME")


@app.command(cls=reads("IngestSettings"))
@guarded
def ingest(
    file: Annotated[Path, typer.Option("--file", help="The file of events (JSON lines, or one MSK event).")],
    file_format: Annotated[str, typer.Option(
        "--format", help="values (JSON lines of event values), envelope (JSON lines of Kafka records: "
                         "topic, partition, offset, timestamp, key, value), msk-event (one MSK event "
                         "document, like events/msk-orders.json), or auto: told by the first line.")] = "auto",
    topic: Annotated[str | None, typer.Option(
        "--topic", parser=topic_name,
        help="values: the topic of the positions (default file.<file name>); a Kafka topic name.")] = None,
    timestamp_field: Annotated[str | None, typer.Option(
        "--timestamp-field", help="values: the record timestamp is this field of the value (epoch ms or "
                                  "ISO-8601 with a zone); default: the time the line is read.")] = None,
    restamp: Annotated[bool, typer.Option(
        "--restamp", help="envelope, msk-event: shift every timestamp so the first record is stamped now "
                          "(keeps the gaps; samples stamped long ago then do not expire on the first flush).")] = False,
    progress_every: Annotated[int, typer.Option(
        "--progress-every", parser=bounded(1, 10**9, integer=True),
        help="A progress line on stderr every this many lines (1 to 10^9) ...")] = 10_000,
    progress_seconds: Annotated[float, typer.Option(
        "--progress-seconds", parser=bounded(0, 86_400, " seconds"),
        help="... or every this many seconds (0 to 86,400), whichever comes first.")] = 5.0,
    as_json: JsonOption = False,
) -> None:
    """Ingest a local file through the same ingest service as the Lambda function: poison goes
    to the dead letter with its reason, and running the same file again is a replay (no-op).
    Plain values get positions from the file: topic file.<name> (or --topic), partition 0,
    offset = line number. Needs CONSOLIDATOR_DATABASE_URL (or CONSOLIDATOR_DATABASE_SECRET_ARN)
    and CONSOLIDATOR_DEAD_LETTER_URL; field names from CONSOLIDATOR_GROUP_KEY_FIELD,
    CONSOLIDATOR_ITEM_ID_FIELD, CONSOLIDATOR_ITEMS_FIELD, CONSOLIDATOR_SKU_FIELD,
    CONSOLIDATOR_QUANTITY_FIELD, CONSOLIDATOR_MAX_EVENT_BYTES. Exit 1 when a line was malformed
    or a record failed (run the same command again once the cause is fixed)."""
    from consolidator.services.file_ingest import CHUNK, ingest_file
    from consolidator.services.ingest import build_ingest_service
    from consolidator.sources.files import BadFile, FileFormat, detect

    if file_format not in FORMATS:
        raise typer.BadParameter(f"one of {', '.join(FORMATS)}; got {file_format!r}", param_hint="--format")
    if not file.is_file():
        raise typer.BadParameter(f"{file} is not a readable file", param_hint="--file")
    chosen = detect(file) if file_format == "auto" else FileFormat(file_format)
    if chosen is not FileFormat.VALUES and (topic or timestamp_field):
        raise typer.BadParameter(f"--topic and --timestamp-field are for plain values; {file} is read as "
                                 f"{chosen}", param_hint="--topic/--timestamp-field")
    if chosen is FileFormat.VALUES and restamp:
        raise typer.BadParameter("plain values are stamped when read (or by --timestamp-field)",
                                 param_hint="--restamp")
    settings = load_settings("IngestSettings")  # a configuration error is the first and only line
    how = {FileFormat.VALUES: "JSON lines of event values (offset = line number)",
           FileFormat.ENVELOPE: "JSON lines of Kafka records (topic, partition, offset, timestamp, key, value)",
           FileFormat.MSK_EVENT: "one MSK event"}[chosen]
    err.print(f"reading {file} as {how}" + (" (detected; --format to choose)" if file_format == "auto" else ""),
              soft_wrap=True)
    service = build_ingest_service(settings)
    try:
        report = ingest_file(file, service, file_format=chosen, topic=topic, timestamp_field=timestamp_field,
                             restamp=restamp, chunk=min(CHUNK, progress_every),
                             on_chunk=_Progress(progress_every, progress_seconds))
    except (OSError, BadFile) as exc:
        raise typer.BadParameter(str(exc), param_hint="--file") from None
    finally:
        service.store.close()
    for m in report.malformed:
        say_error(f"line {m['line']} malformed, not ingested", m["detail"])
    for f in report.failed_lines:
        say_error(f"line {f['line']} failed", f"{f['source']}; see the log above")
    if report.replay_only:
        say_error("nothing new", _replay_only(report))
    if report.stopped_at_line is not None:
        say_error("stopped", f"at line {report.stopped_at_line}; nothing after it was ingested: fix the cause "
                  "and run the same command again (lines already stored are replays)")
    if as_json:
        emit_json(report)
    else:
        for p in report.poison_lines:
            where = f"line {p['line']}" if p["line"] is not None else str(p["source"])
            out.print(f"{where}: poison ({p['reason']}: {p['detail']}), dead-lettered", soft_wrap=True)
        topic_text = f" as topic {report.topic}" if report.topic else ""
        noun = "records" if report.format == "msk-event" else "lines"
        out.print(f"{report.file}{topic_text}: {report.lines} {noun}, {_counts(report)}", soft_wrap=True)
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)
