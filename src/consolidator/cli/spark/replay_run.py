"""``spark replay`` once its input is checked and read (:mod:`consolidator.cli.spark.replay_input`):
the Spark job, its outputs and report written to a staging directory, then moved to ``--out``.

Guarantees: ``--out`` is replaced only once every output and the report are written (the staging
directory is renamed onto it, on the same file system); a run that fails leaves ``--out`` as it was.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from consolidator.cli.render import echo
from consolidator.cli.spark.options import _pairs


def run_replay(out: Path, staged: Path, prepared, policies, settings, chosen: str, bootstrap_servers, topic,
            starting_offsets, ending_offsets, source, kafka_option, master, max_p95_seconds) -> None:
    """The replay into ``staged``, then ``staged`` moved to ``out`` (replacing what was there)."""
    from consolidator.cli.spark.report import recommendation_text, write_report
    from consolidator.spark.figures import compute_figures, describe_input
    from consolidator.spark.replay import replay, write_outputs
    from consolidator.spark.session import build_session
    from consolidator.spark.source import kafka_reader
    from consolidator.spark.transforms import read_record_files, records

    spark = build_session("consolidator-replay", master=master, progress=True)
    if prepared is None:
        options = {"startingOffsets": starting_offsets, "endingOffsets": ending_offsets, **dict(_pairs(kafka_option))}
        frame = records(kafka_reader(spark, bootstrap_servers, topic, streaming=False, prefer=source,
                                     options=options).load())
    else:
        frame = read_record_files(spark, prepared.path, prepared.spark_format)
    result = replay(frame, policies, settings.field_names(), settings.max_event_bytes,
                        settings.value_format_spec()).persist()
    try:
        write_outputs(result, str(staged))
        figures = compute_figures(result, policies)
        source_label = f"kafka {topic} at {bootstrap_servers}" if prepared is None else prepared.how
        summary = describe_input(frame, result, source_label, None if prepared is None else prepared.files)
    finally:
        result.unpersist()
    max_p95_ms = None if max_p95_seconds is None else max_p95_seconds * 1000
    paths = write_report(figures, staged / "report", summary, max_p95_ms)
    if out.is_dir() and not out.is_symlink():
        shutil.rmtree(out)
    elif out.exists() or out.is_symlink():
        out.unlink()
    staged.rename(out)
    for f in figures:
        late = f" ({f.late_arrivals:,} late: older than the TTL when they arrived)" if f.late_arrivals else ""
        echo(f"{f.policy}: {f.messages_in} in, {f.batches_out} batches, compaction {f.compaction_ratio}, "
             f"p95 latency {f.latency_p95_ms / 1000:.1f} s, dead-lettered {f.dead_lettered}, "
             f"expired {f.expired}{late}, held back p95 {f.held_back_p95_ms / 1000:.1f} s")
    advice = recommendation_text(figures, max_p95_ms)
    if advice:
        echo(advice)
    report = out / "report"
    echo(f"report: {report / paths['markdown'].name} ({paths['html'].name}, {paths['chart'].name})")
