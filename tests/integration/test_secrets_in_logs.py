"""No secret in any log line, at any level: the real handlers run at DEBUG (the dev
environment's level, and the root logger at DEBUG as Lambda's ``AWS_LAMBDA_LOG_LEVEL=DEBUG``
sets it), reading the database password and the Redis AUTH token from Secrets Manager (moto);
every line written to stdout and stderr and every record that reaches the root logger is
searched for both.

The flush run is real end to end: a MariaDB of this module (its own port; it accepts any
password) and a Redis of this module that requires the token, so a published batch proves
both secrets were read and used."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import boto3
import local_mariadb
import pytest
import redis
from moto import mock_aws
from support import record
from test_flush import ingest

from consolidator.demo.lambda_context import LocalLambdaContext
from consolidator.rules.clock import ManualClock
from consolidator.store.mysql import ConnectionParams, MySQLStore
from consolidator.support.function_logging import SDK_LOGGERS

ROOT = Path(__file__).resolve().parents[2]
DB_PASSWORD = f"db-pw-{uuid.uuid4().hex}"
REDIS_TOKEN = f"redis-token-{uuid.uuid4().hex}"
HANDLERS = ["ingest", "flush", "cleanup", "acks", "migrate"]

pytestmark = pytest.mark.skipif(not (local_mariadb.available() and shutil.which("redis-server")),
                                reason="needs mariadbd and redis-server")


@contextlib.contextmanager
def _redis_requiring(token: str):
    """A redis-server of this module on a free port that refuses clients without ``token``."""
    port = local_mariadb.free_port()
    directory = tempfile.mkdtemp(prefix="consolidator-redis-")
    server = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                               "--appendonly", "no", "--dir", directory, "--requirepass", token],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                redis.Redis(port=port, password=token, socket_timeout=1).ping()
                break
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.1)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def servers():
    with local_mariadb.mariadb() as db_port, _redis_requiring(REDIS_TOKEN) as redis_port:
        store = MySQLStore(ConnectionParams("127.0.0.1", db_port, "root", "", "consolidator"))
        with contextlib.closing(MySQLStore(ConnectionParams("127.0.0.1", db_port, "root", "", ""))) as server, \
                server.transaction() as cur:
            cur.execute("CREATE DATABASE consolidator CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        store.migrate(int(time.time() * 1000))
        yield store, db_port, redis_port
        store.close()


@pytest.fixture
def function_env(servers, monkeypatch, tmp_path):
    """The functions' settings: the database location in the URL, its user and password in a
    secret; the Redis token in its secret; everything at DEBUG."""
    store, db_port, redis_port = servers
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    with mock_aws():
        client = boto3.client("secretsmanager", region_name="eu-west-1")
        db_secret = client.create_secret(Name=f"db-{uuid.uuid4().hex[:6]}", SecretString=json.dumps(
            {"host": "127.0.0.1", "port": db_port, "username": "consolidator", "password": DB_PASSWORD,
             "dbname": "consolidator"}))["ARN"]
        redis_secret = client.create_secret(Name=f"redis-{uuid.uuid4().hex[:6]}", SecretString=REDIS_TOKEN)["ARN"]
        for name, value in {
            "DATABASE_URL": f"mysql://127.0.0.1:{db_port}/consolidator", "DATABASE_SECRET_ARN": db_secret,
            "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0", "REDIS_AUTH_SECRET_ARN": redis_secret,
            "SINK_URL": f"file://{tmp_path}/batches.jsonl", "DEAD_LETTER_URL": f"file://{tmp_path}/dead-letter.jsonl",
            "COMPLETION_SINK_URL": f"file://{tmp_path}/completions.jsonl",
            "TICK_INTERVAL_SECONDS": "0.25", "LOCK_TTL_SECONDS": "5",
        }.items():
            monkeypatch.setenv(f"CONSOLIDATOR_{name}", value)
        monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "DEBUG")
        monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
        monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Consolidator")
        yield store, tmp_path


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.extend(self.format(record).splitlines())  # with the traceback of an exception


@pytest.fixture
def every_line(capfd):
    """Every output line from here on: stdout, stderr (file descriptors) and the root logger's
    records at DEBUG. Powertools' service loggers are configured afresh (as in a new Lambda
    container) so that they write to this test's stdout."""
    def fresh_powertools_loggers() -> None:
        for name in HANDLERS:
            service = logging.getLogger(f"consolidator-{name}")
            service.handlers.clear()
            service.setLevel(logging.NOTSET)
            for attribute in ("init", "powertools_handler", "powertools_buffer_config", "powertools_buffer_cache"):
                if hasattr(service, attribute):
                    delattr(service, attribute)

    fresh_powertools_loggers()
    root = logging.getLogger()
    collector, level = _Lines(), root.level
    root.addHandler(collector)
    root.setLevel(logging.DEBUG)
    capfd.readouterr()  # what the set-up printed is not the function's

    def lines() -> list[str]:
        # controls: a DEBUG line of the project (through the function's logger, to stdout) and
        # one of another library (to the root logger) are both seen
        logging.getLogger("consolidator.probe").debug("probe-function-debug")
        logging.getLogger("probe").debug("probe-root-debug")
        captured = capfd.readouterr()
        return [*captured.out.splitlines(), *captured.err.splitlines(), *collector.lines]

    try:
        yield lines
    finally:
        root.removeHandler(collector)
        root.setLevel(level)
        fresh_powertools_loggers()


def load_handler(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_handler_secrets_test_{uuid.uuid4().hex[:6]}",
                                                  ROOT / f"functions/{name}/handler.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_flush_handler_at_debug_logs_neither_the_database_password_nor_the_redis_token(function_env,
                                                                                         every_line):
    store, _ = function_env
    clock = ManualClock(time.time_ns() // 1_000_000 - 400_000)  # ingested 400 s ago: idle, due now
    ingest(store, clock, [record(i, location="WH-1", order=f"O{i}", timestamp_ms=clock.now_ms()) for i in range(3)])
    module = load_handler("flush")
    result = module.handler({}, LocalLambdaContext(timeout_ms=1_500))
    lines = every_line()
    # the run was real: both secrets were read and used (the Redis refuses clients without the token)
    assert result["published"] >= 1, result
    assert module.logger.log_level == logging.DEBUG
    assert any('"batch published"' in line for line in lines), "the function's own logs were captured"
    assert any("probe-function-debug" in line for line in lines) and any("probe-root-debug" in line for line in lines)
    leaks = [line for line in lines if DB_PASSWORD in line or REDIS_TOKEN in line]
    assert not leaks, leaks[:3]


def test_the_ingest_handler_at_debug_does_not_log_the_database_password(function_env, every_line):
    module = load_handler("ingest")
    response = module.handler(json.loads((ROOT / "events" / "msk-orders.json").read_text()), LocalLambdaContext())
    lines = every_line()
    assert response == {"batchItemFailures": []}
    assert any("probe-function-debug" in line for line in lines) and any("probe-root-debug" in line for line in lines)
    leaks = [line for line in lines if DB_PASSWORD in line]
    assert not leaks, leaks[:3]


@pytest.mark.parametrize("name", HANDLERS)
def test_every_handler_keeps_the_sdk_loggers_at_warning_whatever_its_level(function_env, every_line, name):
    load_handler(name)
    for sdk in ("botocore", "boto3", "urllib3", "s3transfer", "botocore.parsers", "botocore.endpoint"):
        assert logging.getLogger(sdk).getEffectiveLevel() >= logging.WARNING, (name, sdk)
    assert logging.getLogger("consolidator.store").getEffectiveLevel() == logging.DEBUG or name == "migrate"
    assert set(SDK_LOGGERS) >= {"botocore", "boto3", "urllib3", "s3transfer"}
