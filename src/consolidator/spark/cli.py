"""``consolidator spark ...``: run the streaming aggregator or a replay, or start the streaming
job on EMR Serverless. Also the entry point of ``spark-submit`` (``python -m consolidator.spark``).

Policy settings of ``stream`` (and the replay's tick) default to the Lambda path's environment
variables (``CONSOLIDATOR_DEBOUNCE_SECONDS`` and friends, in seconds), so both engines run the
same policy unless told otherwise; so do the rate limit (``CONSOLIDATOR_RATE_LIMIT_BATCHES`` per
``CONSOLIDATOR_RATE_LIMIT_PERIOD_SECONDS``) and the TTL (``CONSOLIDATOR_EVENT_TTL_SECONDS``).
The replay's policy grid is given in milliseconds (``--rate-limit`` as ``N/SECONDS``, TTL in seconds).
Per-group overrides live in the MySQL path's database; the Spark jobs apply the default limit.
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from consolidator.events import FieldNames
from consolidator.policy import Policy, RateLimit
from consolidator.spark.shards import DEFAULT_SHARDS

spark_app = typer.Typer(help="Spark jobs: streaming aggregator, policy replay, EMR Serverless.",
                        no_args_is_help=True, add_completion=False)

_DEFAULT = Policy()
DebounceOpt = Annotated[float, typer.Option("--debounce-seconds", envvar="CONSOLIDATOR_DEBOUNCE_SECONDS")]
HardOpt = Annotated[float, typer.Option("--hard-window-seconds", envvar="CONSOLIDATOR_HARD_WINDOW_SECONDS")]
SizeOpt = Annotated[int, typer.Option("--max-batch-size", envvar="CONSOLIDATOR_MAX_BATCH_SIZE")]
TickOpt = Annotated[float, typer.Option("--tick-interval-seconds", envvar="CONSOLIDATOR_TICK_INTERVAL_SECONDS",
                                        help="Replay tick grid (the flush function's tick).")]
MasterOpt = Annotated[str | None, typer.Option(
    "--master", help="e.g. local[2]; leave unset under spark-submit / EMR.")]
SourceOpt = Annotated[str, typer.Option(
    "--source", help="Kafka reader: auto (Spark's kafka connector if present), spark or python.")]
GroupField = Annotated[str, typer.Option("--group-key-field", envvar="CONSOLIDATOR_GROUP_KEY_FIELD")]
ItemField = Annotated[str, typer.Option("--item-id-field", envvar="CONSOLIDATOR_ITEM_ID_FIELD")]
ItemsField = Annotated[str, typer.Option("--items-field", envvar="CONSOLIDATOR_ITEMS_FIELD")]
MaxBytes = Annotated[int, typer.Option("--max-event-bytes", envvar="CONSOLIDATOR_MAX_EVENT_BYTES")]
RateBatchesOpt = Annotated[int, typer.Option(
    "--rate-limit-batches", envvar="CONSOLIDATOR_RATE_LIMIT_BATCHES", help="Batches per group per period; 0: none.")]
RatePeriodOpt = Annotated[float, typer.Option("--rate-limit-period-seconds",
                                              envvar="CONSOLIDATOR_RATE_LIMIT_PERIOD_SECONDS")]
TtlOpt = Annotated[float, typer.Option("--event-ttl-seconds", envvar="CONSOLIDATOR_EVENT_TTL_SECONDS",
                                       help="Event time-to-live; 0: off.")]
KafkaOpts = Annotated[list[str] | None, typer.Option(
    "--kafka-option", help="key=value passed to the Kafka reader (e.g. kafka.security.protocol=SSL).")]


def _pairs(values: list[str] | None) -> tuple[tuple[str, str], ...]:
    pairs = []
    for value in values or []:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected key=value, got {value!r}", param_hint="--kafka-option")
        pairs.append((key, rest))
    return tuple(pairs)


def _url(url: str, schemes: tuple[str, ...], option: str) -> str:
    """Checked before Spark starts: a wrong URL fails in a second, not after the JVM is up."""
    scheme = url.partition("://")[0] if "://" in url else ""
    if scheme not in schemes:
        raise typer.BadParameter(f"must start with {' or '.join(s + '://' for s in schemes)}, got {url!r}",
                                 param_hint=option)
    return url


def _source(bootstrap_servers: str | None, topic: str | None, input_path: str | None, input_format: str) -> None:
    """Exactly one source, checked before Spark starts: Kafka (both options) or --input."""
    if input_path is not None:
        if bootstrap_servers or topic:
            raise typer.BadParameter("read Kafka (--bootstrap-servers, --topic) or files (--input), not both",
                                     param_hint="--input")
        if input_format not in ("json", "parquet"):
            raise typer.BadParameter(f"json or parquet, got {input_format!r}", param_hint="--format")
        if "://" not in input_path and not Path(input_path).is_dir():
            raise typer.BadParameter(f"{input_path} is not a directory", param_hint="--input")
    elif not (bootstrap_servers and topic):
        raise typer.BadParameter("pass --bootstrap-servers and --topic (Kafka), or --input DIR (files)",
                                 param_hint="--bootstrap-servers")


def _policy(*args: int, **kwargs) -> Policy:
    try:
        return Policy(*args, **kwargs)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="the policy options") from None


def _batch_cap(sink_url: str, configured: int | None) -> int:
    """The same byte cap as the flush function: the sink's per-message limit unless lower."""
    from consolidator.sinks import sink_from_url

    try:
        sink = sink_from_url(sink_url)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--sink-url") from None
    try:
        limit = sink.max_message_bytes
    finally:
        sink.close()
    if configured is not None and configured > limit:
        raise typer.BadParameter(f"{configured} is over the sink's per-message limit ({limit} bytes)",
                                 param_hint="--max-batch-bytes")
    return configured or limit


def _rate(batches: int, period_seconds: float) -> RateLimit | None:
    return RateLimit(batches, round(period_seconds * 1000)) if batches else None


def _rates(values: str, option: str) -> list[RateLimit | None]:
    """Comma-separated ``N/SECONDS`` candidates, ``none`` for no limit: ``none,2/60,10/3600``."""
    parsed: list[RateLimit | None] = []
    for value in (v.strip() for v in values.split(",") if v.strip()):
        if value.lower() in ("none", "0"):
            parsed.append(None)
            continue
        batches, _, seconds = value.partition("/")
        try:
            parsed.append(RateLimit(int(batches), round(float(seconds) * 1000)))
        except ValueError as error:
            raise typer.BadParameter(f"expected N/SECONDS or none, got {value!r} ({error})", param_hint=option) from None
    if not parsed:
        raise typer.BadParameter("at least one value", param_hint=option)
    return parsed


def _floats(values: str, option: str) -> list[float]:
    try:
        parsed = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(f"comma-separated numbers expected, got {values!r}", param_hint=option) from None
    if not parsed or min(parsed) < 0:
        raise typer.BadParameter("at least one value, none negative", param_hint=option)
    return parsed


def _ints(values: str, option: str) -> list[int]:
    try:
        parsed = [int(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(f"comma-separated integers expected, got {values!r}", param_hint=option) from None
    if not parsed:
        raise typer.BadParameter("at least one value", param_hint=option)
    return parsed


@spark_app.command()
def stream(
    sink_url: Annotated[str, typer.Option("--sink-url", envvar="CONSOLIDATOR_SINK_URL")],
    dead_letter_url: Annotated[str, typer.Option("--dead-letter-url", envvar="CONSOLIDATOR_DEAD_LETTER_URL")],
    checkpoint: Annotated[str, typer.Option("--checkpoint", help="Checkpoint directory (s3://... on EMR).")],
    debounce_seconds: DebounceOpt = _DEFAULT.debounce_ms / 1000,
    hard_window_seconds: HardOpt = _DEFAULT.hard_window_ms / 1000,
    max_batch_size: SizeOpt = _DEFAULT.max_batch_size,
    trigger_ms: Annotated[int, typer.Option("--trigger-ms")] = 5_000,
    starting_offsets: Annotated[str, typer.Option("--starting-offsets")] = "earliest",
    max_offsets_per_trigger: Annotated[int | None, typer.Option("--max-offsets-per-trigger")] = None,
    source: SourceOpt = "auto",
    kafka_option: KafkaOpts = None,
    group_key_field: GroupField = "location_id",
    item_id_field: ItemField = "order_id",
    items_field: ItemsField = "items",
    max_event_bytes: MaxBytes = 262_144,
    master: MasterOpt = None,
    max_batch_bytes: Annotated[int | None, typer.Option(
        "--max-batch-bytes", envvar="CONSOLIDATOR_MAX_BATCH_BYTES", min=1,
        help="Cap on one batch message (default: the sink's per-message limit).")] = None,
    rate_limit_batches: RateBatchesOpt = 0,
    rate_limit_period_seconds: RatePeriodOpt = 60.0,
    event_ttl_seconds: TtlOpt = 21_600.0,
    completion_database_url: Annotated[str | None, typer.Option(
        "--completion-database-url", envvar="CONSOLIDATOR_COMPLETION_DATABASE_URL",
        help="Completion tracking: seal every batch in this database (mysql://...) before it is "
             "published, so the acks function tracks Spark-built batches too.")] = None,
    state_shards: Annotated[int, typer.Option(
        "--state-shards", min=1, help="State keys (shards of the group keys; at least the stateful stage's partitions); "
                                   "fixed for a checkpoint.")] = DEFAULT_SHARDS,
    bootstrap_servers: Annotated[str | None, typer.Option(
        "--bootstrap-servers", envvar="CONSOLIDATOR_KAFKA_BOOTSTRAP",
        help="Kafka to read (e.g. what `consolidator kafka serve` printed).")] = None,
    topic: Annotated[str | None, typer.Option("--topic", envvar="CONSOLIDATOR_SOURCE_TOPIC")] = None,
    input_path: Annotated[str | None, typer.Option(
        "--input", help="Instead of Kafka: a directory; each record file that appears in it is read once "
                        "(the replay's JSON lines, or Parquet).")] = None,
    input_format: Annotated[str, typer.Option("--format", help="Of --input: json or parquet.")] = "json",
) -> None:
    """Run the streaming aggregator until stopped (Kafka, or the files of --input, in; batches to
    the sink URL)."""
    from consolidator.spark.session import build_session, log_progress
    from consolidator.spark.streaming import BatchWriter, StreamConfig, start

    _source(bootstrap_servers, topic, input_path, input_format)
    _url(sink_url, ("kafka", "sqs", "events", "file"), "--sink-url")
    _url(dead_letter_url, ("sqs", "file"), "--dead-letter-url")
    if completion_database_url is not None:
        _url(completion_database_url, ("mysql",), "--completion-database-url")
    max_batch_bytes = _batch_cap(sink_url, max_batch_bytes)
    config = StreamConfig(
        bootstrap_servers=bootstrap_servers or "", topic=topic or "", sink_url=sink_url, dead_letter_url=dead_letter_url,
        checkpoint=checkpoint,
        policy=_policy(round(debounce_seconds * 1000), round(hard_window_seconds * 1000), max_batch_size,
                       _DEFAULT.tick_interval_ms, max_batch_bytes,
                       rate_limit=_rate(rate_limit_batches, rate_limit_period_seconds),
                       ttl_ms=round(event_ttl_seconds * 1000)),
        names=FieldNames(group_key=group_key_field, item_id=item_id_field, items=items_field),
        max_event_bytes=max_event_bytes, trigger_ms=trigger_ms, starting_offsets=starting_offsets,
        max_offsets_per_trigger=max_offsets_per_trigger, source=source, kafka_options=_pairs(kafka_option),
        tracking_database_url=completion_database_url, state_shards=state_shards,
        input_path=input_path, input_format=input_format,
    )
    spark = build_session("consolidator-stream", master=master)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    log_progress(spark)  # one line per micro-batch on stderr
    writer = BatchWriter(sink_url, dead_letter_url, tracking_database_url=completion_database_url)
    query = start(spark, config, writer=writer)
    typer.echo(f"streaming {input_path or topic} -> {sink_url} (checkpoint {checkpoint}); Ctrl-C to stop", err=True)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    finally:
        writer.close()


@spark_app.command()
def replay(
    out: Annotated[Path, typer.Option("--out", help="Output directory: batches/, dead_letter/, report/.")],
    input_path: Annotated[str | None, typer.Option("--input", help="JSON lines or Parquet of records.")] = None,
    input_format: Annotated[str, typer.Option("--format", help="json, parquet or kafka")] = "json",
    bootstrap_servers: Annotated[str | None, typer.Option("--bootstrap-servers")] = None,
    topic: Annotated[str | None, typer.Option("--topic")] = None,
    starting_offsets: Annotated[str, typer.Option("--starting-offsets")] = "earliest",
    ending_offsets: Annotated[str, typer.Option("--ending-offsets")] = "latest",
    debounce_ms: Annotated[str, typer.Option("--debounce-ms", help="Comma-separated candidates.")] = str(
        _DEFAULT.debounce_ms),
    hard_window_ms: Annotated[str, typer.Option("--hard-window-ms", help="Comma-separated candidates.")] = str(
        _DEFAULT.hard_window_ms),
    max_batch_size: Annotated[str, typer.Option("--max-batch-size", help="Comma-separated candidates.")] = str(
        _DEFAULT.max_batch_size),
    tick_interval_seconds: TickOpt = _DEFAULT.tick_interval_ms / 1000,
    source: SourceOpt = "auto",
    kafka_option: KafkaOpts = None,
    group_key_field: GroupField = "location_id",
    item_id_field: ItemField = "order_id",
    items_field: ItemsField = "items",
    max_event_bytes: MaxBytes = 262_144,
    max_p95_seconds: Annotated[float | None, typer.Option(
        "--max-p95-seconds", help="Recommend the policy with the best compaction within this p95 latency.")] = None,
    master: MasterOpt = None,
    rate_limit: Annotated[str | None, typer.Option(
        "--rate-limit", help="Comma-separated candidates N/SECONDS or none (default: the environment's "
                             "CONSOLIDATOR_RATE_LIMIT_BATCHES per CONSOLIDATOR_RATE_LIMIT_PERIOD_SECONDS).")] = None,
    rate_limit_batches: RateBatchesOpt = 0,
    rate_limit_period_seconds: RatePeriodOpt = 60.0,
    ttl_seconds: Annotated[str, typer.Option(
        "--event-ttl-seconds", envvar="CONSOLIDATOR_EVENT_TTL_SECONDS",
        help="Comma-separated TTL candidates in seconds; 0: off.")] = "21600",
) -> None:
    """Replay history under a grid of policies; writes batches and a Markdown/HTML report with a chart."""
    from consolidator.spark.replay import policy_grid, write_outputs
    from consolidator.spark.replay import replay as run_replay
    from consolidator.spark.report import (
        compute_figures,
        describe_input,
        recommendation_text,
        write_report,
    )
    from consolidator.spark.session import build_session
    from consolidator.spark.source import kafka_reader
    from consolidator.spark.transforms import read_record_files, records

    try:
        policies = policy_grid(_ints(debounce_ms, "--debounce-ms"), _ints(hard_window_ms, "--hard-window-ms"),
                               _ints(max_batch_size, "--max-batch-size"), round(tick_interval_seconds * 1000),
                               _rates(rate_limit, "--rate-limit") if rate_limit is not None
                               else [_rate(rate_limit_batches, rate_limit_period_seconds)],
                               [round(float(t) * 1000) for t in _floats(ttl_seconds, "--event-ttl-seconds")])
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="the policy grid") from None
    # every input checked before Spark starts
    if input_format not in ("json", "parquet", "kafka"):
        raise typer.BadParameter(f"json, parquet or kafka, got {input_format!r}", param_hint="--format")
    if input_format == "kafka" and not (bootstrap_servers and topic):
        raise typer.BadParameter("--format kafka needs --bootstrap-servers and --topic")
    if input_format != "kafka" and not input_path:
        raise typer.BadParameter("--input is required unless --format kafka")
    if input_format != "kafka" and "://" not in input_path and not Path(input_path).exists():
        raise typer.BadParameter(f"{input_path} does not exist", param_hint="--input")
    spark = build_session("consolidator-replay", master=master, progress=True)
    if input_format == "kafka":
        options = {"startingOffsets": starting_offsets, "endingOffsets": ending_offsets, **dict(_pairs(kafka_option))}
        frame = records(kafka_reader(spark, bootstrap_servers, topic, streaming=False, prefer=source,
                                     options=options).load())
    elif input_path:
        frame = read_record_files(spark, input_path, input_format)
    else:
        raise typer.BadParameter("--input is required unless --format kafka")
    names = FieldNames(group_key=group_key_field, item_id=item_id_field, items=items_field)
    result = run_replay(frame, policies, names, max_event_bytes).persist()
    try:
        write_outputs(result, str(out))
        figures = compute_figures(result, policies)
        source_label = f"kafka {topic} at {bootstrap_servers}" if input_format == "kafka" else f"{input_format} {input_path}"
        summary = describe_input(frame, result, source_label)
    finally:
        result.unpersist()
    max_p95_ms = None if max_p95_seconds is None else max_p95_seconds * 1000
    paths = write_report(figures, out / "report", summary, max_p95_ms)
    for f in figures:
        typer.echo(f"{f.policy}: {f.messages_in} in, {f.batches_out} batches, compaction {f.compaction_ratio}, "
                   f"p95 latency {f.latency_p95_ms / 1000:.1f} s, dead-lettered {f.dead_lettered}, "
                   f"expired {f.expired}, held back p95 {f.held_back_p95_ms / 1000:.1f} s")
    advice = recommendation_text(figures, max_p95_ms)
    if advice:
        typer.echo(advice)
    typer.echo(f"report: {paths['markdown']} ({paths['html'].name}, {paths['chart'].name})")


@spark_app.command("emr-submit", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def emr_submit(
    ctx: typer.Context,
    application_id: Annotated[str, typer.Option("--application-id", envvar="CONSOLIDATOR_EMR_APPLICATION_ID")],
    execution_role_arn: Annotated[str, typer.Option("--execution-role-arn", envvar="CONSOLIDATOR_EMR_JOB_ROLE_ARN")],
    bucket: Annotated[str, typer.Option("--bucket", envvar="CONSOLIDATOR_EMR_BUCKET",
                                        help="Bucket of the EMR construct (code/, checkpoints/, logs/).")],
    name: Annotated[str, typer.Option("--name")] = "consolidator-stream",
    submit: Annotated[bool, typer.Option("--submit", help="Call StartJobRun instead of printing it.")] = False,
    region: Annotated[str | None, typer.Option("--region")] = None,
    archive: Annotated[str | None, typer.Option(
        "--archive", help="File name of the environment archive under code/ (default: the one "
                          "`make emr-archive` builds for the construct's release).")] = None,
) -> None:
    """Print (or with --submit, call) StartJobRun for the streaming job. Arguments after ``--``
    go to ``stream`` (e.g. -- --bootstrap-servers b-1...:9098 --topic orders --sink-url ...)."""
    from consolidator.spark.emr import start_job_run_request

    request = start_job_run_request(
        application_id=application_id, execution_role_arn=execution_role_arn,
        code_uri=f"s3://{bucket}/code", checkpoint_uri=f"s3://{bucket}/checkpoints/{name}",
        stream_args=list(ctx.args), name=name, archive=archive, log_uri=f"s3://{bucket}/logs/",
    )
    if not submit:
        typer.echo(json.dumps(request, indent=2))
        typer.echo("# or: aws emr-serverless start-job-run --cli-input-json " + shlex.quote(json.dumps(request)),
                   err=True)
        return
    import boto3

    response = boto3.client("emr-serverless", region_name=region).start_job_run(**request)
    typer.echo(json.dumps({"jobRunId": response["jobRunId"], "applicationId": response["applicationId"],
                           "arn": response.get("arn")}))


def main() -> None:
    spark_app(prog_name="consolidator spark", args=sys.argv[1:])
