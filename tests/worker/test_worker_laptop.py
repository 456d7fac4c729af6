"""docs/guide/worker.md's laptop run, as a user runs it: the example's settings file, ``kafka serve``,
``worker`` and ``kafka produce`` as three processes; the sample's batches and poison come out,
Ctrl-C stops the worker cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

from local_mariadb import free_port
from support import REDIS_URL
from worker_support import CLI, log_lines, wait_for

ROOT = Path(__file__).resolve().parents[2]


def example_settings() -> dict[str, str]:
    found = {}
    for line in (ROOT / "examples" / "worker" / "settings.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition("=")
            found[name] = value
    return found


def test_the_laptop_run_of_the_docs(database_url, store, tmp_path: Path):
    base = {k: v for k, v in os.environ.items() if not k.startswith("CONSOLIDATOR_")}
    env = {**base, **example_settings(), "CONSOLIDATOR_DATABASE_URL": database_url,
           "CONSOLIDATOR_REDIS_URL": REDIS_URL, "CONSOLIDATOR_LOCK_KEY": f"test-worker:{uuid.uuid4().hex}",
           "CONSOLIDATOR_SINK_URL": f"file://{tmp_path / 'batches.jsonl'}",
           "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{tmp_path / 'dead.jsonl'}",
           "CONSOLIDATOR_WORKER_HTTP_PORT": str(free_port())}
    kafka = subprocess.Popen([*CLI, "kafka", "serve"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env)
    try:
        bootstrap = kafka.stdout.readline().strip()
        worker = subprocess.Popen([*CLI, "worker"], env={**env, "CONSOLIDATOR_KAFKA_BOOTSTRAP": bootstrap},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            produced = subprocess.run([*CLI, "kafka", "produce", "--bootstrap-servers", bootstrap, "--topic", "orders",
                                       "events/orders.jsonl"], env=env, cwd=ROOT, capture_output=True, text=True,
                                      timeout=60, check=False)
            assert produced.returncode == 0, produced.stderr
            batches, dead = tmp_path / "batches.jsonl", tmp_path / "dead.jsonl"
            wait_for(lambda: batches.exists() and len(batches.read_text().splitlines()) == 3, 30, "3 batches")
            assert sorted(json.loads(line)["reason"] for line in dead.read_text().splitlines()) == [
                "bad_quantity", "missing_group_key"]
            worker.send_signal(signal.SIGINT)
            stdout, stderr = worker.communicate(timeout=30)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.communicate(timeout=30)
        assert worker.returncode == 0, stderr
        lines = log_lines(stdout)  # every line JSON, the services' own lines too
        messages = [line["message"] for line in lines]
        assert messages.count("batch published") == 3 and "poison record dead-lettered" in messages
        assert "worker stopped" in messages and {line["service"] for line in lines} == {"consolidator-worker"}
    finally:
        kafka.send_signal(signal.SIGTERM)
        kafka.communicate(timeout=30)
