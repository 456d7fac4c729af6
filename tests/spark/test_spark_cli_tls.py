"""Spark's completion tracking never connects to its database in plaintext (as the functions,
whose secrets always turn TLS on): ``spark stream`` refuses a trackers' URL without TLS before
Spark starts, ``spark emr-submit`` refuses to submit one, and the executors' writer refuses it
before reading any secret. A loopback host (a local run) is this machine and may go without."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from consolidator.cli.spark.commands import spark_app
from consolidator.rules.errors import DeliveryError
from consolidator.spark.delivery import close_destinations, deliver_partition

runner = CliRunner()
ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:trackers-AbCdEf"
PLAINTEXT = "mysql://db.internal:3306/consolidator"
REFUSED = "the connection to db.internal would be plaintext (the password included): add ?ssl=true"


@pytest.mark.parametrize("secret", [(), ("--completion-database-secret-arn", ARN)], ids=["url", "url+secret"])
def test_stream_refuses_a_plaintext_trackers_database_before_spark_starts(tmp_path, secret):
    result = runner.invoke(spark_app, [
        "stream", "--input", str(tmp_path), "--checkpoint", str(tmp_path / "ckpt"),
        "--sink-url", f"file://{tmp_path}/out.jsonl", "--dead-letter-url", f"file://{tmp_path}/dead.jsonl",
        "--completion-database-url", PLAINTEXT, *secret])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("configuration error:") and "--completion-database-url" in line and REFUSED in line


def test_emr_submit_refuses_a_plaintext_trackers_database():
    result = runner.invoke(spark_app, [
        "emr-submit", "--application-id", "00abc", "--execution-role-arn", "arn:aws:iam::1:role/job",
        "--bucket", "my-bucket", "--", "--topic", "orders", "--completion-database-url", PLAINTEXT,
        "--completion-database-secret-arn", ARN])
    assert result.exit_code == 2, result.output
    assert REFUSED in result.stderr and result.stdout == ""


def test_the_executors_writer_refuses_a_plaintext_trackers_database_before_reading_the_secret(tmp_path):
    row = {"kind": "batch", "group_key": "WH-1", "batch_id": "0" * 32, "reason": "idle",
           "body": '{"batch_id": "' + "0" * 32 + '", "group_key": "WH-1", "members": []}'}
    with pytest.raises(DeliveryError, match="would be plaintext"):
        try:
            deliver_partition([row], sink_url=f"file://{tmp_path}/out.jsonl",
                              dead_letter_url=f"file://{tmp_path}/dead.jsonl", epoch_id=1,
                              tracking_database_url=PLAINTEXT, tracking_database_secret_arn=ARN)
        finally:
            close_destinations()
    assert not (tmp_path / "out.jsonl").exists(), "nothing published without its seal"
