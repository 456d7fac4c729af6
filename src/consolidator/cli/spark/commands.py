"""``consolidator spark ...``: run the streaming aggregator or a replay, or start the streaming
job on EMR Serverless. Also the entry point of ``spark-submit`` (``python -m consolidator.cli.spark``).

Every setting option is an override of the settings model (``consolidator.settings``:
``StreamSettings``, ``ReplaySettings``, ``EmrSettings``): same name as the variable without its
``CONSOLIDATOR_`` prefix, same unit (seconds), same bounds and cross-setting rules, and an unset
option falls back to the variable, then to the model's default. So both engines run the same
policy and read the same field names unless told otherwise; a bad value is one usage error (exit
2) naming the option or variable. The replay's policy grid takes comma-separated candidates in
the same units (``--debounce-seconds 60,300``; ``--rate-limit`` as ``N/SECONDS``), each checked
as an override of the model. Per-group limit overrides live in the MySQL path's database; the
Spark jobs apply the default limit.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from consolidator.cli.options import MARKUP_MODE, bounded, topic_name
from consolidator.cli.render import echo
from consolidator.cli.spark.options import (
    KafkaOpts,
    MasterOpt,
    SettingValues,
    SourceOpt,
    _batch_cap,
    _candidates,
    _pairs,
    _rate,
    _settings,
    _source,
    _usage_error,
    grid_settings,
    option_flag,
    setting_options,
)
from consolidator.cli.spark.options import (
    max_p95_seconds as _max_p95,
)
from consolidator.cli.spark.replay_input import Refused, choose, prepare
from consolidator.cli.spark.replay_run import run_replay
from consolidator.rules.errors import ConsolidatorError
from consolidator.settings import EmrSettings, ReplaySettings, StreamSettings
from consolidator.spark.shards import DEFAULT_SHARDS
from consolidator.support.redact import masked

spark_app = typer.Typer(help="Spark jobs: streaming aggregator, policy replay, EMR Serverless.",
                        no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                        rich_markup_mode=MARKUP_MODE)  # the help style of the rest of the CLI

@spark_app.command()
@setting_options(StreamSettings, "stream")
def stream(
    checkpoint: Annotated[str, typer.Option("--checkpoint", help="Checkpoint directory (s3://... on EMR).")],
    trigger_ms: Annotated[int, typer.Option("--trigger-ms", parser=bounded(1, 86_400_000, " ms", integer=True),
                                            help="Micro-batch interval (1 to 86,400,000 ms).")] = 5_000,
    starting_offsets: Annotated[str, typer.Option("--starting-offsets")] = "earliest",
    max_offsets_per_trigger: Annotated[int | None, typer.Option(
        "--max-offsets-per-trigger", parser=bounded(1, 10**12, integer=True),
        help="At most this many records per micro-batch (1 to 10^12).")] = None,
    source: SourceOpt = "auto",
    kafka_option: KafkaOpts = None,
    master: MasterOpt = None,
    state_shards: Annotated[int, typer.Option(
        "--state-shards", parser=bounded(1, 1_000_000, integer=True),
        help="State keys (shards of the group keys; at least the stateful stage's partitions); "
             "fixed for a checkpoint.")] = DEFAULT_SHARDS,
    input_path: Annotated[str | None, typer.Option(
        "--input", help="Instead of Kafka: a directory; each record file that appears in it is read once "
                        "(the replay's JSON lines, or Parquet).")] = None,
    input_format: Annotated[str, typer.Option("--format", help="Of --input: json or parquet.")] = "json",
    *,
    settings: SettingValues,
) -> None:
    """Run the streaming aggregator until stopped (Kafka, or the files of --input, in; batches to
    the sink URL). SIGTERM or Ctrl-C stops it after its current micro-batch, with one line naming
    the offsets it stopped at (exit 0)."""
    s = _settings(StreamSettings, settings.values)
    _source(s.kafka_bootstrap, s.source_topic, input_path, input_format)
    from consolidator.spark.streaming import StreamConfig

    cap, measure = _batch_cap(s.sink_url, s.max_batch_bytes)
    config = StreamConfig(
        bootstrap_servers=s.kafka_bootstrap or "", topic=s.source_topic or "", sink_url=s.sink_url,
        dead_letter_url=s.dead_letter_url, checkpoint=checkpoint,
        policy=dataclasses.replace(s.policy(), max_batch_bytes=cap, measure_body=measure), names=s.field_names(),
        max_event_bytes=s.max_event_bytes, trigger_ms=trigger_ms, starting_offsets=starting_offsets,
        max_offsets_per_trigger=max_offsets_per_trigger, source=source, kafka_options=_pairs(kafka_option),
        tracking_database_url=s.completion_database_url,
        tracking_database_secret_arn=s.completion_database_secret_arn, state_shards=state_shards,
        input_path=input_path, input_format=input_format, values=s.value_format_spec(),
    )
    from consolidator.spark.stop import SignalStop

    stopper = SignalStop()
    stopper.install()  # a signal during Spark's start-up stops the query as soon as it runs
    try:
        _stream(stopper, config, s, checkpoint, input_path, master)
    except ConsolidatorError as error:  # the trackers' database or its secret, before the query runs
        echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    finally:
        stopper.restore()


def _stream(stopper, config, s, checkpoint: str, input_path: str | None, master: str | None) -> None:
    """Start the streaming query and run it until it ends or ``stopper`` catches a signal."""
    from consolidator.spark.delivery import BatchWriter
    from consolidator.spark.session import build_session, log_progress
    from consolidator.spark.stop import stop_line
    from consolidator.spark.streaming import start

    spark = build_session("consolidator-stream", master=master, stream=True)
    stopper.install()  # again: PySpark's SparkContext took SIGINT (it would cancel the running jobs)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # at INFO it logs every callback of every micro-batch
    log_progress(spark)  # one line per micro-batch on stderr
    writer = BatchWriter(s.sink_url, s.dead_letter_url, tracking_database_url=s.completion_database_url,
                         tracking_database_secret_arn=s.completion_database_secret_arn)
    query = start(spark, config, writer=writer)
    source = f"files in {input_path}" if input_path else f"topic {s.source_topic}"
    echo(f"streaming {source} -> {masked(s.sink_url)} (checkpoint {checkpoint});"
         " Ctrl-C or SIGTERM stops it after the current micro-batch", err=True)
    try:
        caught = stopper.run(query)
    finally:
        writer.close()
    if caught:
        echo(stop_line(query, caught, source), err=True)
        spark.stop()


def replay_grid(params: dict) -> tuple[list, object]:
    """The replay's policies: every combination of the grid settings' candidates (``params``:
    setting -> comma-separated candidates or value, None: not given; ``rate_limit``: the
    ``--rate-limit`` candidates), each checked as overrides of
    :class:`~consolidator.settings.ReplaySettings` (so with the settings' bounds and errors);
    combinations whose hard window is shorter than their debounce are left out (said on stderr).
    Returns the named policies and the settings of the first one (field names)."""
    from consolidator.rules.errors import ConfigurationError
    from consolidator.settings import WINDOWS_RULE, load_settings
    from consolidator.spark.replay import NamedPolicy, policy_name

    options = {name: option_flag(name, info) for name, info in ReplaySettings.model_fields.items()}
    grid, gridded = {}, grid_settings(ReplaySettings)
    for name, info in ReplaySettings.model_fields.items():  # in declaration order: the order of the policies
        if name == "rate_limit_batches":  # --rate-limit: candidates of both rate settings at once
            grid["rate"] = _candidates(params.get("rate_limit"), "--rate-limit", _rate, "N/SECONDS or none")
        elif name in gridded:
            grid[name] = _candidates(params.get(name), options[name], info.annotation,
                                     "integers" if info.annotation is int else "seconds")
    policies, first, left_out = {}, None, 0
    for values in itertools.product(*grid.values()):
        combo = dict(zip(grid, values, strict=True))
        batches, period = combo.pop("rate") or (params.get("rate_limit_batches"), params.get("rate_limit_period_seconds"))
        if params.get("rate_limit") is not None:
            options.update(rate_limit_batches="--rate-limit", rate_limit_period_seconds="--rate-limit")
        overrides = {**{k: v for k, v in params.items() if k in ReplaySettings.model_fields}, **combo,
                     "rate_limit_batches": batches, "rate_limit_period_seconds": period}
        try:
            s = load_settings(ReplaySettings, overrides=overrides, options=options)
        except ConfigurationError as exc:
            if str(exc).endswith(WINDOWS_RULE) and str(exc).count(WINDOWS_RULE) == 1 and "; " not in str(exc):
                left_out += 1
                continue
            _usage_error(exc)
        first = first or s
        policy = s.policy()
        policies.setdefault(policy_name(policy), NamedPolicy(policy_name(policy), policy))
    if not policies:
        _usage_error(f"the policy grid is empty: every combination has a hard window shorter "
                     f"than its debounce ({WINDOWS_RULE})")
    if left_out:
        echo(f"left out {left_out} combination(s) whose hard window is shorter than the debounce", err=True)
    return list(policies.values()), first


@spark_app.command()
@setting_options(ReplaySettings, "replay")
def replay(
    out: Annotated[Path, typer.Option("--out", help="Output directory: batches/, dead_letter/, report/.")],
    input_path: Annotated[str | None, typer.Option(
        "--input", help="A file as `ingest --file` reads it, a directory or URL of record JSON lines, or "
                        "Parquet of records.")] = None,
    input_format: Annotated[str, typer.Option(
        "--format", help="auto (a local file: told by its first line, as `ingest --file` does; else json), "
                         "values, envelope, msk-event, json (envelope lines, also a directory or URL), "
                         "parquet or kafka.")] = "auto",
    timestamp_field: Annotated[str | None, typer.Option(
        "--timestamp-field", help="values: each record arrives at this field of the value (a path; epoch ms "
                                  "or ISO-8601 with a zone); default: the time the line is read.")] = None,
    bootstrap_servers: Annotated[str | None, typer.Option("--bootstrap-servers")] = None,
    topic: Annotated[str | None, typer.Option(
        "--topic", parser=topic_name,
        help="--format kafka: the topic; values: the topic of the positions (default file.<file name>).")] = None,
    starting_offsets: Annotated[str, typer.Option("--starting-offsets")] = "earliest",
    ending_offsets: Annotated[str, typer.Option("--ending-offsets")] = "latest",
    source: SourceOpt = "auto",
    kafka_option: KafkaOpts = None,
    max_p95_seconds: Annotated[float | None, typer.Option(
        "--max-p95-seconds", parser=_max_p95,
        help="Recommend the policy with the best compaction within this p95 latency.")] = None,
    master: MasterOpt = None,
    rate_limit: Annotated[str | None, typer.Option(
        "--rate-limit", help="Comma-separated candidates N/SECONDS or none (default: --rate-limit-batches "
                             "per --rate-limit-period-seconds).")] = None,
    *,
    settings: SettingValues,
) -> None:
    """Replay history under a grid of policies; writes batches and a Markdown/HTML report with a chart."""
    values = settings.values
    policies, settings = replay_grid({**values, "rate_limit": rate_limit})
    # every input checked, and a file read, before Spark starts; a refusal is one line
    try:
        chosen = choose(input_path, input_format, timestamp_field)
        if chosen == "kafka" and not (bootstrap_servers and topic):
            raise Refused("--format kafka needs --bootstrap-servers and --topic")
        if not out.parent.is_dir():
            raise Refused(f"the directory of --out, {out.parent}, does not exist")
    except Refused as exc:
        _refuse(exc)
    # everything is written beside the target and moved there at the end: never a partial --out
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        try:
            prepared = None if chosen == "kafka" else prepare(input_path, chosen, timestamp_field, topic,
                                                              work / "input")
        except Refused as exc:
            _refuse(exc)
        if prepared is not None:
            echo(f"reading {prepared.how}" + (f": {prepared.records:,} records" if prepared.records is not None
                                              else ""), err=True)
            if prepared.skipped:
                echo(f"{len(prepared.skipped):,} line(s) are not records and are not replayed; first "
                     f"{prepared.skipped[0]}", err=True)
        run_replay(out, work / "out", prepared, policies, settings, chosen, bootstrap_servers, topic, starting_offsets,
                ending_offsets, source, kafka_option, master, max_p95_seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _refuse(exc: Exception) -> NoReturn:
    echo(f"cannot replay: {exc}", err=True)
    raise typer.Exit(2)


@spark_app.command("emr-submit", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@setting_options(EmrSettings, "emr-submit")
def emr_submit(
    ctx: typer.Context,
    name: Annotated[str, typer.Option("--name")] = "consolidator-stream",
    submit: Annotated[bool, typer.Option("--submit", help="Call StartJobRun instead of printing it.")] = False,
    region: Annotated[str | None, typer.Option("--region")] = None,
    archive: Annotated[str | None, typer.Option(
        "--archive", help="File name of the environment archive under code/ (default: the one "
                          "`make emr-archive` builds for the construct's release).")] = None,
    *,
    settings: SettingValues,
) -> None:
    """Print (or with --submit, call) StartJobRun for the streaming job. Arguments after '--'
    go to 'stream' (e.g. -- --bootstrap-servers b-1...:9098 --topic orders --sink-url ...).

    A job's arguments are readable by anyone who may read the job run: a URL with a password is
    refused (exit 2; pass --completion-database-secret-arn instead), and what is printed has
    every credential masked."""
    from consolidator.spark.emr import start_job_run_request

    _no_password_in(list(ctx.args))
    s = _settings(EmrSettings, settings.values)
    request = start_job_run_request(
        application_id=s.emr_application_id, execution_role_arn=s.emr_job_role_arn,
        code_uri=f"s3://{s.emr_bucket}/code", checkpoint_uri=f"s3://{s.emr_bucket}/checkpoints/{name}",
        stream_args=list(ctx.args), name=name, archive=archive, log_uri=f"s3://{s.emr_bucket}/logs/",
    )
    if not submit:
        printed = _masked_request(request)
        for line in json.dumps(printed, indent=2).splitlines():
            echo(line)
        echo("# or: aws emr-serverless start-job-run --cli-input-json " + shlex.quote(json.dumps(printed)),
                   err=True)
        return
    import boto3

    response = boto3.client("emr-serverless", region_name=region).start_job_run(**request)
    echo(json.dumps({"jobRunId": response["jobRunId"], "applicationId": response["applicationId"],
                           "arn": response.get("arn")}))


def _no_password_in(args: list[str]) -> None:
    """Refuse job arguments that carry a URL password (the database's belongs in its secret) or a
    trackers' database URL that would connect in plaintext (the job would refuse it at start)."""
    from urllib.parse import urlsplit

    from consolidator.store.connection import ConnectionParams, plaintext_refusal

    values = [arg.partition("=")[2] if arg.startswith("--") and "=" in arg else arg for arg in args]
    for value in values:
        if "://" in value and urlsplit(value).password:
            echo(f"refused: a job argument carries a password ({masked(value)}); job arguments are readable "
                 "by anyone who may read the job run: pass the database's Secrets Manager secret with "
                 "--completion-database-secret-arn and a URL without credentials", err=True)
            raise typer.Exit(2)
    for index, arg in enumerate(args):
        if arg.partition("=")[0] != "--completion-database-url":
            continue
        url = values[index] if "=" in arg else (args[index + 1] if index + 1 < len(args) else "")
        if url.startswith("mysql://") and (refusal := plaintext_refusal(ConnectionParams.from_url(url))):
            echo(f"refused: --completion-database-url {masked(url)}: {refusal}", err=True)
            raise typer.Exit(2)


def _masked_request(request: dict) -> dict:
    """``request`` with every credential in the job's arguments masked (for printing)."""
    printed = json.loads(json.dumps(request))
    driver = printed["jobDriver"]["sparkSubmit"]
    driver["entryPointArguments"] = [masked(arg) for arg in driver["entryPointArguments"]]
    return printed


def main() -> None:
    spark_app(prog_name="consolidator spark", args=sys.argv[1:])
