"""The EMR Serverless target of the Spark jobs, in one place: the release the CDK construct
deploys, what that release runs, the environment archive built for it (``make emr-archive``),
and the ``StartJobRun`` request that uses the archive.

Facts about the release (AWS's release pages for ``emr-spark-8.0.0``): Apache Spark
4.0.2-amzn-0, Scala 2.13, JDK 17, Python 3.11, 3.12 and 3.13. The archive is a virtualenv in the
layout ``venv-pack`` writes (AWS's documented way): ``bin/python`` is a symlink to the image's own
interpreter, ``lib/python3.12/site-packages`` holds the locked dependencies (manylinux wheels for
the application's architecture) and the ``consolidator`` package, without pyspark/py4j, which
come from the release's Spark. Spark unpacks it as ``./environment`` on the driver and on every
executor (``spark.archives=...#environment``).
"""

from __future__ import annotations

RELEASE_LABEL = "emr-spark-8.0.0"
SPARK_VERSION = "4.0.2"  # the release's Spark (4.0.2-amzn-0); the Kafka connector matches it
SCALA_BINARY = "2.13"
ARCHITECTURE = "ARM64"  # the application's (AWS::EMRServerless::Application Architecture)
PYTHON_VERSION = "3.12"  # one of the release's interpreters, the Lambda functions' version too
INTERPRETER = f"/usr/bin/python{PYTHON_VERSION}"  # where Amazon Linux 2023 installs it
# Amazon Linux 2023 has glibc 2.34: any manylinux wheel up to 2.34 runs there.
WHEEL_PLATFORMS = {"ARM64": "aarch64-manylinux_2_34", "X86_64": "x86_64-manylinux_2_34"}
MACHINES = {"ARM64": "aarch64", "X86_64": "x86_64"}
KAFKA_PACKAGE = f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{SPARK_VERSION}"
ENVIRONMENT = "environment"  # the directory Spark unpacks the archive into (the '#' fragment)
PYTHON = f"./{ENVIRONMENT}/bin/python"
ENTRY_POINT = "entry.py"


def archive_name(python_version: str = PYTHON_VERSION, architecture: str = ARCHITECTURE) -> str:
    """``consolidator-emr-py3.12-aarch64.tar.gz``: the Python and the machine it is built for."""
    return f"consolidator-emr-py{python_version}-{MACHINES[architecture]}.tar.gz"


def submit_parameters(archive_uri: str, *, kafka_package: str = KAFKA_PACKAGE) -> list[str]:
    """The ``spark-submit`` settings that run the job's Python from the archive: the driver
    (``spark.emr-serverless.driverEnv``) and the executors (``spark.executorEnv``)."""
    return [
        f"--conf spark.archives={archive_uri}#{ENVIRONMENT}",
        f"--conf spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON={PYTHON}",
        f"--conf spark.emr-serverless.driverEnv.PYSPARK_PYTHON={PYTHON}",
        f"--conf spark.executorEnv.PYSPARK_PYTHON={PYTHON}",
        f"--conf spark.jars.packages={kafka_package}",
        ("--conf spark.sql.streaming.stateStore.providerClass="
         "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"),
    ]


def start_job_run_request(
    *, application_id: str, execution_role_arn: str, code_uri: str, checkpoint_uri: str, stream_args: list[str],
    name: str = "consolidator-stream", archive: str | None = None, kafka_package: str = KAFKA_PACKAGE,
    log_uri: str | None = None,
) -> dict:
    """The ``StartJobRun`` request for the streaming job (``mode=STREAMING``: EMR Serverless
    restarts it from the S3 checkpoint after a failure). ``code_uri`` holds ``entry.py`` and the
    archive (default :func:`archive_name`), as ``make emr-archive`` says to upload them."""
    code_uri = code_uri.rstrip("/")
    request: dict = {
        "applicationId": application_id,
        "executionRoleArn": execution_role_arn,
        "name": name,
        "mode": "STREAMING",
        "retryPolicy": {"maxFailedAttemptsPerHour": 5},
        "jobDriver": {"sparkSubmit": {
            "entryPoint": f"{code_uri}/{ENTRY_POINT}",
            "entryPointArguments": ["stream", "--source", "spark", "--checkpoint", checkpoint_uri, *stream_args],
            "sparkSubmitParameters": " ".join(submit_parameters(
                f"{code_uri}/{archive or archive_name()}", kafka_package=kafka_package)),
        }},
    }
    if log_uri:
        request["configurationOverrides"] = {
            "monitoringConfiguration": {"s3MonitoringConfiguration": {"logUri": log_uri}}}
    return request
