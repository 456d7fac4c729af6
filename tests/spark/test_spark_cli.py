"""``consolidator spark ...``: replay end to end, and the EMR Serverless StartJobRun request."""

from __future__ import annotations

import json

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
