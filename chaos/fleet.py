"""Worker scenarios: ``consolidator worker`` processes in one consumer group on a local Kafka (the
mock cluster, :mod:`chaos.kafka`), while workers are SIGKILLed, added and removed, or the database
or Redis is killed; then recovery; then the exact checkers the Lambda path's scenarios use.

A third of the topic is produced before the workers start, the rest while the faults run. What
the run counts as acknowledged is what Kafka holds as committed: every record below an offset the
group committed must be durable. Three readings of the committed offsets feed that check:

- sampled during the run (about twice a second) and checked against the database at once, so a
  commit that ran ahead of its write is caught while the write is still missing;
- every commit a worker logged (``offsets committed``);
- the group's committed offsets at the end, which must have reached every partition's end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pymysql
from confluent_kafka import KafkaException

from chaos.checks import Snapshot, not_durable, run_checks
from chaos.kafka import MockKafka
from chaos.scenarios import OBSERVATIONS, Run, RunResult, Scenario
from chaos.workload import TOPIC, make_workload

PARTITIONS = 4
SESSION_TIMEOUT_MS = 3000  # the broker's KIP-848 session timeout: a SIGKILLed worker's partitions move after it
STREAM_S = 3.0  # the last two thirds of the topic are produced over this long, while the faults run
# Faults go on after the last record was produced for at least AFTER_STREAM_S, and until the
# scenario injected MIN_FAULTS of its faults (whatever the draws of its intervals and the fleet's boot)
AFTER_STREAM_S = 1.0
MIN_FAULTS = 3
SAMPLE_EVERY_S = 0.5
FLEET_ENV = {
    "CONSOLIDATOR_KAFKA_GROUP_PROTOCOL": "consumer",  # KIP-848: rebalances in milliseconds on the mock cluster
    "CONSOLIDATOR_WORKER_COMMIT_INTERVAL_SECONDS": "0.5",
    "CONSOLIDATOR_WORKER_BATCH_RECORDS": "100",  # small writes: kills land between, during and after them
    "CONSOLIDATOR_WORKER_WRITE_WAIT_SECONDS": "3",
    "CONSOLIDATOR_WORKER_SHUTDOWN_SECONDS": "10",
    "POWERTOOLS_LOG_LEVEL": "INFO",  # the "offsets committed" lines
    "PYTHONUNBUFFERED": "1",
}

FLEET_SCENARIOS = {s.name: s for s in (
    Scenario("worker-kill", workers=3, worker_kill_every=(0.8, 2.0), crash_after_publish_p=0.05),
    Scenario("worker-rebalance", workers=3, worker_churn_every=(0.8, 2.0)),
    Scenario("worker-db-kill", workers=3, db_kill_every=(0.8, 2.0)),
    Scenario("worker-redis-kill", workers=3, redis_kill_every=(0.4, 1.2)),
)}


class Member:
    """One worker process (a pod of the fleet), signalled only by the pid its ``Popen`` gave."""

    def __init__(self, index: int, repo: Path, env: dict[str, str], log: Path) -> None:
        self.index, self.repo, self.env, self.log = index, repo, env, log
        self.process: subprocess.Popen | None = None
        self.wanted = True  # False once removed: the supervisor no longer restarts it
        self.killed = False  # SIGKILLed by the harness since its last start
        self._log_from = 0  # where the log of its current start begins

    def start(self) -> None:
        self.killed = False
        self._log_from = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out, self.log.with_suffix(".err").open("ab") as err:
            self.process = subprocess.Popen([sys.executable, "-m", "chaos.workers", "worker", str(self.repo)],
                                            stdout=out, stderr=err, env=self.env, cwd=self.repo)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def ready(self) -> bool:
        """Running, and its current start got as far as ``worker started`` (signals handled)."""
        if not self.alive():
            return False
        with self.log.open("rb") as log:
            log.seek(self._log_from)
            return b'"message":"worker started"' in log.read()

    def wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.ready():
            if not self.alive() or time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def kill(self) -> bool:
        process = self.process
        if process is None or process.poll() is not None:
            return False
        self.killed = True
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        return True

    def terminate(self, timeout_s: float) -> int | None:
        """SIGTERM once it is ready (a worker still booting has no handler yet); the exit code, or
        None when it did not exit within ``timeout_s`` (then SIGKILLed)."""
        process = self.process
        if process is None or process.poll() is not None:
            return None if process is None else process.returncode
        self.wait_ready(timeout_s)
        os.kill(process.pid, signal.SIGTERM)
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def log_lines(self) -> list[dict]:
        """Its JSON log lines (a line cut short by a SIGKILL is skipped)."""
        found = []
        if self.log.exists():
            for line in self.log.read_text(errors="replace").splitlines():
                try:
                    found.append(json.loads(line))
                except ValueError:
                    continue
        return found


class FleetRun(Run):
    """One worker scenario's run (the set-up, faults and snapshot of :class:`Run`)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.group = f"chaos-{self.database}"
        self.kafka: MockKafka | None = None
        self.members: list[Member] = []
        self.halt = threading.Event()  # the supervisor and the sampler stop
        self.mutex = threading.Lock()  # members are added, removed and restarted under it
        self.sampled: list[str] = []

    def fleet_env(self) -> dict[str, str]:
        env = self.env()
        env.update(FLEET_ENV)
        env.update({"CONSOLIDATOR_KAFKA_BOOTSTRAP": self.kafka.bootstrap, "CONSOLIDATOR_SOURCE_TOPICS": TOPIC,
                    "CONSOLIDATOR_KAFKA_GROUP_ID": self.group, "CONSOLIDATOR_LOCK_KEY": f"chaos:{self.database}"})
        return env

    def add_member(self) -> None:
        member = Member(len(self.members), self.repo, self.fleet_env(), self.dir / f"worker-{len(self.members)}.log")
        member.start()
        self.members.append(member)

    # -- the moving parts ----------------------------------------------------------------------

    def supervise(self) -> None:
        """Restart every wanted worker that is not running (what Kubernetes does for a pod)."""
        while not self.halt.wait(0.2):
            with self.mutex:
                for member in self.members:
                    if member.wanted and not member.alive():
                        code = member.process.returncode if member.process else None
                        if not member.killed:  # died by itself: the fault hook, or a failure
                            self.count("worker SIGKILL after publish" if code == -signal.SIGKILL
                                       else "worker exits")
                        member.start()
                        self.count("worker restarts")

    def kill_worker(self) -> None:
        with self.mutex:
            ready = [m for m in self.members if m.wanted and m.ready()]  # not one still booting
            if ready and self.rng.choice(ready).kill():
                self.count("worker SIGKILL")

    def churn(self) -> None:
        """Add a worker, or remove one (SIGTERM, which must exit 0): between 2 and 4 running."""
        with self.mutex:
            running = [m for m in self.members if m.wanted]
            if len(running) <= 2 or (len(running) < 4 and self.rng.random() < 0.5):
                self.add_member()
                self.count("worker added")
                return
            leaving = self.rng.choice(running)
            leaving.wanted = False
        code = leaving.terminate(timeout_s=30)
        self.count("worker removed (SIGTERM)")
        if code != 0:
            self.errors.append(f"worker {leaving.index} exited {code} after SIGTERM (expected 0)")

    def sample(self, produced) -> None:
        """Read the group's committed offsets, then at once the buffer and the dead letter: every
        record below a committed offset must already be durable."""
        while not self.halt.wait(SAMPLE_EVERY_S):
            try:
                committed = self.kafka.committed(self.group, TOPIC, PARTITIONS)
                rows = self.rows()
            except (KafkaException, pymysql.err.MySQLError):
                continue  # the database may be down: no sample this time
            dead = self.dir / "dead-letter.jsonl"
            snapshot = Snapshot(produced, below(committed), b"", dead.read_bytes() if dead.exists() else b"", rows)
            found = not_durable(snapshot)
            if found:
                self.sampled += [f"sampled while running, committed {committed}: {v}" for v in found]

    def rows(self) -> list[dict]:
        return self.query(
            "SELECT r.src_topic, r.src_partition, r.src_offset, r.group_key, r.item_id, r.batch_id,"
            " COALESCE(b.state, r.status) AS status"
            " FROM buffer_rows r LEFT JOIN batches b ON r.status = 'CLAIMED' AND b.batch_id = r.batch_id"
            " ORDER BY r.src_topic, r.src_partition, r.src_offset")

    # -- one run -------------------------------------------------------------------------------

    def execute(self) -> RunResult:
        started = time.monotonic()
        self.create_database()
        workload = make_workload(self.seed, self.events, partitions=PARTITIONS)
        by_position = {r.position: r for records in workload.records.values() for r in records}
        ordered = [by_position[p.position] for p in workload.produced]
        ends = {p: len(records) for p, records in workload.records.items() if records}
        self.kafka = MockKafka(SESSION_TIMEOUT_MS)
        threads: list[threading.Thread] = []
        try:
            self.kafka.create_topic(TOPIC, PARTITIONS)
            head = len(ordered) // 3
            self.errors += self.kafka.produce(ordered[:head])
            for _ in range(self.s.workers):
                self.add_member()
            for member in self.members:  # faults start once the fleet is up (each worker boots for seconds)
                if not member.wait_ready(60):
                    self.errors.append(f"worker {member.index} did not start: see {member.log.name}")
            booted = time.monotonic() - started
            threads = [threading.Thread(target=self.supervise, daemon=True),
                       threading.Thread(target=self.sample, args=(workload.produced,), daemon=True)]
            for thread in threads:
                thread.start()
            injectors = self.injectors()
            self.stream(ordered[head:])
            streamed = time.monotonic() - started
            self.faults_after_stream()
            self.stop.set()
            for thread in injectors:
                thread.join(timeout=60)
            if self.mariadb.process is None:
                self.mariadb.start()
            if self.redis.process is None:
                self.redis.start()
            faults_over = time.monotonic() - started
            self.drain(ends)
            print(f"chaos: {self.s.name} seed {self.seed}: fleet up at {booted:.1f}s, streamed at {streamed:.1f}s,"
                  f" faults until {faults_over:.1f}s, drained at {time.monotonic() - started:.1f}s",
                  file=sys.stderr, flush=True)
            self.halt.set()
            for thread in threads:
                thread.join(timeout=30)
            self.terminate_all()
            committed = self.kafka.committed(self.group, TOPIC, PARTITIONS)
        finally:
            self.halt.set()
            for member in self.members:
                member.kill()
            self.kafka.close()
        if committed != ends:
            self.errors.append(f"the group's committed offsets {committed} are not the partitions' ends {ends}")
        logged = self.logged_commits()
        acknowledged = below(committed) | below(logged)
        snapshot = self.snapshot(workload.produced, acknowledged)
        violations = self.checks(snapshot)
        self.faults["partitions assigned"] = sum(
            1 for m in self.members for line in m.log_lines() if line.get("message") == "partitions assigned")
        self.faults["commits logged"] = sum(
            1 for m in self.members for line in m.log_lines() if line.get("message") == "offsets committed")
        return RunResult(self.s.name, self.seed, workload.size, self.faults, violations,
                         republished_same_id=self.republished(snapshot), seconds=time.monotonic() - started,
                         snapshot=snapshot)

    def checks(self, snapshot: Snapshot) -> dict[str, list[str]]:
        violations = run_checks(snapshot)
        violations["not_durable"] = violations.get("not_durable", []) + self.sampled[:3]
        if self.errors:
            violations["harness"] = self.errors
        return violations

    def faults_after_stream(self) -> None:
        """Faults go on for ``AFTER_STREAM_S``, then until ``MIN_FAULTS`` were injected."""
        time.sleep(AFTER_STREAM_S)
        self.keep_going_until(lambda: self.injected() >= MIN_FAULTS, 60,
                              f"fewer than {MIN_FAULTS} faults injected within 60 s after the stream")

    def injected(self) -> int:
        return sum(n for fault, n in self.faults.items() if fault not in OBSERVATIONS)

    def terminate_all(self) -> None:
        """SIGTERM every wanted worker at once (each must exit 0), as a rollout's scale-down does."""
        def terminate(member: Member) -> None:
            code = member.terminate(timeout_s=30)
            if code != 0:
                self.errors.append(f"worker {member.index} exited {code} after SIGTERM (expected 0)")

        threads = [threading.Thread(target=terminate, args=(m,), daemon=True) for m in self.members if m.wanted]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=70)

    def injectors(self) -> list[threading.Thread]:
        s = self.s
        plan = [(s.worker_kill_every, self.kill_worker), (s.worker_churn_every, self.churn),
                (s.db_kill_every, self.kill_database), (s.redis_kill_every, self.kill_redis)]
        return [self.every(interval, action) for interval, action in plan if interval]

    def stream(self, records: list) -> None:
        """Produce ``records`` in equal chunks over ``STREAM_S``."""
        steps = max(1, int(STREAM_S / 0.2))
        size = -(-len(records) // steps)
        for start in range(0, len(records), size):
            began = time.monotonic()
            self.errors += self.kafka.produce(records[start:start + size])
            time.sleep(max(0.0, 0.2 - (time.monotonic() - began)))

    def drain(self, ends: dict[int, int], timeout_s: float = 120.0) -> None:
        """Wait until the group committed every partition to its end and nothing is PENDING or
        CLAIMED (the workers flush by themselves); revive DEAD batches through the CLI once."""
        deadline = time.monotonic() + timeout_s
        redriven = False
        while time.monotonic() < deadline:
            time.sleep(0.3)
            try:
                if self.kafka.committed(self.group, TOPIC, PARTITIONS) != ends:
                    continue
                states = self.query("SELECT COALESCE(b.state, r.status) AS state, COUNT(*) AS n FROM buffer_rows r"
                                    " LEFT JOIN batches b ON r.status = 'CLAIMED' AND b.batch_id = r.batch_id"
                                    " GROUP BY 1 UNION ALL SELECT state, COUNT(*) FROM batches GROUP BY state")
            except (KafkaException, pymysql.err.MySQLError):
                continue
            counts = {state: 0 for state in ("PENDING", "CLAIMED", "DEAD")}
            for row in states:
                if row["state"] in counts:
                    counts[row["state"]] += row["n"]
            if counts["DEAD"] and not redriven:
                self.faults["batches DEAD"] = counts["DEAD"]
                self.redrive()
                redriven = True
            elif not counts["PENDING"] and not counts["CLAIMED"]:
                return
        self.errors.append(f"the fleet did not drain the topic and the buffer within {timeout_s}s")

    def logged_commits(self) -> dict[int, int]:
        """The highest offset each partition's commits were logged at, over every worker."""
        highest: dict[int, int] = {}
        for member in self.members:
            for line in member.log_lines():
                if line.get("message") == "offsets committed":
                    for entry in line.get("offsets", []):
                        if entry["topic"] == TOPIC:
                            highest[entry["partition"]] = max(highest.get(entry["partition"], 0), entry["offset"])
        return highest


def below(offsets: dict[int, int]) -> set[tuple[str, int, int]]:
    """Every position below each partition's offset."""
    return {(TOPIC, partition, o) for partition, offset in offsets.items() for o in range(offset)}
