"""``consolidator spark ...``: replay end to end, and the EMR Serverless StartJobRun request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from consolidator.cli.spark.commands import spark_app

runner = CliRunner()


def test_emr_submit_prints_a_streaming_start_job_run():
    result = runner.invoke(spark_app, [
        "emr-submit", "--application-id", "00abc", "--execution-role-arn", "arn:aws:iam::1:role/job",
        "--bucket", "my-bucket", "--", "--bootstrap-servers", "b-1:9098", "--topic", "orders",
        "--sink-url", "kafka://b-1:9098/batches?auth=iam&region=eu-west-1",
        "--dead-letter-url", "sqs://sqs.eu-west-1.amazonaws.com/1/dlq"])
    assert result.exit_code == 0, result.output
    request = json.loads(result.stdout[: result.stdout.rindex("}") + 1])
    assert (request["applicationId"], request["mode"]) == ("00abc", "STREAMING")
    driver = request["jobDriver"]["sparkSubmit"]
    assert driver["entryPoint"] == "s3://my-bucket/code/entry.py"
    assert driver["entryPointArguments"][:5] == [
        "stream", "--source", "spark", "--checkpoint", "s3://my-bucket/checkpoints/consolidator-stream"]
    assert "--topic" in driver["entryPointArguments"] and "orders" in driver["entryPointArguments"]
    submit = driver["sparkSubmitParameters"].split(" ")
    # the archive `make emr-archive` builds, the Python inside it on the driver and the executors
    assert "spark.archives=s3://my-bucket/code/consolidator-emr-py3.12-aarch64.tar.gz#environment" in submit
    for conf in ("spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON", "spark.emr-serverless.driverEnv.PYSPARK_PYTHON",
                 "spark.executorEnv.PYSPARK_PYTHON"):
        assert f"{conf}=./environment/bin/python" in submit, conf
    # the Kafka connector of the release's Spark (4.0.2, Scala 2.13)
    assert "spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.2" in submit


def test_emr_submit_takes_another_archive_name():
    result = runner.invoke(spark_app, [
        "emr-submit", "--application-id", "00abc", "--execution-role-arn", "arn:aws:iam::1:role/job",
        "--bucket", "my-bucket", "--archive", "env-x86.tar.gz", "--", "--topic", "orders"])
    assert result.exit_code == 0, result.output
    assert "spark.archives=s3://my-bucket/code/env-x86.tar.gz#environment" in result.stdout


def test_replay_rejects_a_bad_grid():
    result = runner.invoke(spark_app, ["replay", "--out", "x", "--input", "y", "--debounce-seconds", "1s"])
    assert result.exit_code != 0 and "comma-separated seconds" in result.output


@pytest.mark.spark
def test_replay_command_writes_batches_and_report(spark, tmp_path):
    source = tmp_path / "in.jsonl"
    lines = [{"topic": "t", "partition": 0, "offset": i, "timestamp": 1_795_000_020_000 + i * 1000,
              "value": json.dumps({"location_id": f"G{i % 2}", "order_id": f"o{i}", "items": []})}
             for i in range(6)]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out"
    result = runner.invoke(spark_app, ["replay", "--input", str(source), "--out", str(out),
                                       "--debounce-seconds", "60,120", "--max-batch-size", "2,500",
                                       "--event-ttl-seconds", "0", "--max-p95-seconds", "1000"])
    assert result.exit_code == 0, result.output
    assert "d60s-h1800s-n2-t30s: 6 in, 4 batches" in result.output  # 2 full + 2 idle
    report = json.loads((out / "report" / "report.json").read_text())
    # n500 compacts best (3 events per batch); d60 and d120 tie on compaction, d60 has the lower p95
    assert report["recommended"] == "d60s-h1800s-n500-t30s" and "`d60s-h1800s-n500-t30s`" in result.output
    assert {k: report["input"][k] for k in ("records", "groups", "first_ms", "last_ms")} == {
        "records": 6, "groups": 2, "first_ms": 1_795_000_020_000, "last_ms": 1_795_000_025_000}
    assert [f.rsplit("/", 1)[-1] for f in report["input"]["files"]] == ["in.jsonl"]
    page = (out / "report" / "report.html").read_text()
    assert "Recommendation" in page and "records: 6" in page and "hard window 1800 s" in page
    assert [(r["policy"], r["batches_out"]) for r in report["policies"]] == [
        ("d60s-h1800s-n2-t30s", 4), ("d60s-h1800s-n500-t30s", 2),
        ("d120s-h1800s-n2-t30s", 4), ("d120s-h1800s-n500-t30s", 2)]
    assert (out / "report" / "chart.png").stat().st_size > 1000
    assert len(list((out / "batches").glob("policy=*"))) == 4


@pytest.mark.spark
def test_replay_grid_of_rate_limits_and_ttls(spark, tmp_path):
    """Six orders of one group 1 s apart, batches of 2: unlimited, all three batches go at the
    first due tick; limited to 1 per 60 s, the second and third are each held back 60 s; a 90 s
    TTL then expires the last two rows before their turn."""
    source = tmp_path / "in.jsonl"
    lines = [{"topic": "t", "partition": 0, "offset": i, "timestamp": 1_795_000_020_000 + i * 1000,
              "value": json.dumps({"location_id": "G", "order_id": f"o{i}", "items": []})} for i in range(6)]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out"
    result = runner.invoke(spark_app, ["replay", "--input", str(source), "--out", str(out),
                                       "--debounce-seconds", "60", "--max-batch-size", "2",
                                       "--rate-limit", "none,1/60", "--event-ttl-seconds", "0,90"])
    assert result.exit_code == 0, result.output
    report = {r["policy"]: r for r in json.loads((out / "report" / "report.json").read_text())["policies"]}
    assert sorted(report) == ["d60s-h1800s-n2-t30s", "d60s-h1800s-n2-t30s-r1per60s",
                              "d60s-h1800s-n2-t30s-r1per60s-ttl90s", "d60s-h1800s-n2-t30s-ttl90s"]
    assert report["d60s-h1800s-n2-t30s"]["held_back_batches"] == 0
    limited = report["d60s-h1800s-n2-t30s-r1per60s"]
    assert (limited["batches_out"], limited["held_back_batches"], limited["held_back_max_ms"]) == (3, 2, 60_000)
    assert limited["expired"] == 0 and limited["unbatched"] == 0
    expiring = report["d60s-h1800s-n2-t30s-r1per60s-ttl90s"]
    assert (expiring["batches_out"], expiring["expired"], expiring["unbatched"]) == (2, 2, 0)
    assert report["d60s-h1800s-n2-t30s-ttl90s"]["expired"] == 0
    assert "rate-limit" not in result.output and "held back p95" in result.output
    assert runner.invoke(spark_app, ["replay", "--out", "x", "--input", "y", "--rate-limit", "2/"]).exit_code != 0


EMR = ["emr-submit", "--application-id", "00abc", "--execution-role-arn", "arn:aws:iam::1:role/job", "--bucket", "my-bucket",
       "--"]


@pytest.mark.parametrize("url_args", [
    ["--completion-database-url", "mysql://admin:hunter2@db.internal:3306/consolidator"],
    ["--completion-database-url=mysql://admin:hunter2@db.internal:3306/consolidator"],
])
def test_emr_submit_refuses_a_password_in_the_job_arguments(url_args):
    result = runner.invoke(spark_app, [*EMR, "--topic", "orders", *url_args])
    assert result.exit_code == 2
    assert "hunter2" not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--completion-database-secret-arn" in lines[0] and "***@db.internal" in lines[0]


def test_emr_submit_prints_the_secret_arn_and_masks_credentials_it_prints():
    arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:trackers-AbCdEf"
    result = runner.invoke(spark_app, [
        *EMR, "--topic", "orders", "--completion-database-url", "mysql://db.internal:3306/consolidator?ssl=true",
        "--completion-database-secret-arn", arn,
        "--kafka-option", 'kafka.sasl.jaas.config=ScramLoginModule required username="u" password="hunter2";'])
    assert result.exit_code == 0, result.output
    assert "hunter2" not in result.stdout + result.stderr
    arguments = json.loads(result.stdout[: result.stdout.rindex("}") + 1])["jobDriver"]["sparkSubmit"][
        "entryPointArguments"]
    assert arguments[arguments.index("--completion-database-secret-arn") + 1] == arn
    assert 'password="***"' in arguments[arguments.index("--kafka-option") + 1]


def test_stream_checks_the_secret_arn_before_spark_starts():
    result = runner.invoke(spark_app, [
        "stream", "--bootstrap-servers", "b:9092", "--topic", "t", "--sink-url", "file:///tmp/x.jsonl",
        "--dead-letter-url", "file:///tmp/d.jsonl", "--checkpoint", "/tmp/c",
        "--completion-database-secret-arn", "mysql://admin:hunter2@db/x"])
    assert result.exit_code == 2 and "secretsmanager" in result.output
    assert "hunter2" not in result.output


def test_replay_and_stream_take_the_event_shape_as_options_checked_before_spark_starts(tmp_path):
    bad = '[{"name": "n", "op": "avg"}]'
    replayed = runner.invoke(spark_app, ["replay", "--input", str(tmp_path), "--out", str(tmp_path / "out"),
                                         "--aggregate", bad, "--member-payload", "all"])
    assert replayed.exit_code == 2
    assert "--aggregate: entry 0 ('n'): op must be one of" in replayed.output and "--member-payload" in replayed.output
    streamed = runner.invoke(spark_app, ["stream", "--input", str(tmp_path), "--checkpoint", str(tmp_path / "c"),
                                         "--sink-url", f"file://{tmp_path}/b.jsonl",
                                         "--dead-letter-url", f"file://{tmp_path}/d.jsonl", "--aggregate", bad])
    assert streamed.exit_code == 2 and "--aggregate: entry 0 ('n')" in streamed.output


def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


@pytest.mark.spark
def test_replay_reads_a_values_file_as_ingest_does_and_reports_late_arrivals(spark, tmp_path, monkeypatch):
    """The file `ingest --file` and `kafka produce` take: told by its first line, its records
    arrive at --timestamp-field; with an event time field, an event 48 hours old when it arrives
    expires under a one-hour TTL and the report says it arrived late."""
    monkeypatch.setenv("CONSOLIDATOR_EVENT_TIME_FIELD", "ts")
    base = 1_795_000_020_000
    values = [json.dumps({"location_id": "C-1", "order_id": f"n{i}", "items": [], "sent": base + i * 1000,
                          "ts": _iso(base + i * 1000 - (48 * 3_600_000 if i == 0 else 0))}) for i in range(5)]
    source = tmp_path / "values.jsonl"
    source.write_text("\n".join([*values, "", "{not json"]) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.txt").write_text("from an earlier run")
    result = runner.invoke(spark_app, ["replay", "--input", str(source), "--out", str(out),
                                       "--timestamp-field", "sent", "--debounce-seconds", "60",
                                       "--event-ttl-seconds", "3600"])
    assert result.exit_code == 0, result.output
    assert "reading values " in result.stderr and ": 6 records" in result.stderr
    assert "d60s-h1800s-n500-t30s-ttl3600s: 6 in, 1 batches" in result.stdout
    assert "expired 1 (1 late: older than the TTL when they arrived)" in result.stdout
    (policy,) = json.loads((out / "report" / "report.json").read_text())["policies"]
    assert (policy["expired"], policy["late_arrivals"], policy["dead_lettered"]) == (1, 1, 1)
    (dead,) = [json.loads(line) for part in (out / "dead_letter").glob("part-*") for line in part.read_text().splitlines()]
    assert (dead["reason"], dead["source"]["offset"]) == ("not_json", 7)  # the line number, blank lines counted
    (batch,) = [json.loads(line) for part in (out / "batches").rglob("part-*") for line in part.read_text().splitlines()]
    assert (batch["first_event_at"], batch["event_count"]) == (_iso(base + 1000).replace("Z", ".000Z"), 4)
    assert not (out / "stale.txt").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["out", "values.jsonl"]


def test_replay_refuses_an_input_it_cannot_read_in_one_line_before_spark_starts(tmp_path, monkeypatch):
    from consolidator.spark import session

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark started")

    monkeypatch.setattr(session, "build_session", no_spark)
    envelopes = tmp_path / "broken.jsonl"
    envelopes.write_text('{"topic": "t", "partition": 0, "offset": null, "value": "x"}\n')
    values = tmp_path / "values.jsonl"
    values.write_text('{"location_id": "a", "order_id": "b"}\n')
    cases = {
        ("--input", str(tmp_path / "missing.jsonl")): "does not exist",
        ("--input", str(envelopes), "--format", "envelope"): "holds no record to replay as envelope (line 1: offset",
        ("--input", str(values), "--format", "msk-event"): "no record to replay as msk-event (bad_event: not a Kafka",
        ("--input", str(values), "--format", "csv"): "--format is one of auto, values, envelope",
        ("--input", str(envelopes), "--timestamp-field", "ts"): "--timestamp-field is for plain values",
        ("--input", str(tmp_path), "--format", "values"): "reads one local file",
    }
    for args, expected in cases.items():
        result = runner.invoke(spark_app, ["replay", "--out", str(tmp_path / "out"), *args])
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("cannot replay: ") and expected in lines[0], (args, lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.jsonl", "values.jsonl"]  # no partial output


@pytest.mark.spark
def test_a_replay_that_fails_leaves_no_partial_output_and_the_old_output_as_it_was(spark, tmp_path, monkeypatch):
    """The job fails half way through writing its outputs: nothing of it is left, and the
    output of an earlier run is as it was."""
    from consolidator.spark import replay

    def half_written(result, out_dir: str) -> None:
        (Path(out_dir) / "batches").mkdir(parents=True)
        (Path(out_dir) / "batches" / "part-00000.txt").write_text("{}")
        raise RuntimeError("the cluster went away")

    monkeypatch.setattr(replay, "write_outputs", half_written)
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"topic": "t", "partition": 0, "offset": 1, "timestamp": 1_795_000_020_000,
                                  "value": json.dumps({"location_id": "a", "order_id": "b", "items": []})}) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "kept.txt").write_text("an earlier run")
    result = runner.invoke(spark_app, ["replay", "--input", str(source), "--out", str(out)])
    assert isinstance(result.exception, RuntimeError)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out"]
    assert [p.name for p in out.iterdir()] == ["kept.txt"]
