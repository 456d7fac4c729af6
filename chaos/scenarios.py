"""One chaos run: a seeded topic through the real handlers in child processes while one kind of
fault is injected, then recovery, then the exact checkers."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

from chaos.acker import LEASE_S, Acker
from chaos.checks import Snapshot, run_checks
from chaos.esm import EventSourceEmulator
from chaos.process import Worker
from chaos.servers import MariaDB, Redis
from chaos.workload import make_workload
from consolidator.store.mysql import MySQLStore

FLUSH_TIMEOUT_S = 1.5  # one scheduled flush invocation
LOCK_TTL_S = 1.0
POLICY_ENV = {
    "CONSOLIDATOR_DEBOUNCE_SECONDS": "0.3", "CONSOLIDATOR_HARD_WINDOW_SECONDS": "1.5",
    "CONSOLIDATOR_MAX_BATCH_SIZE": "40", "CONSOLIDATOR_TICK_INTERVAL_SECONDS": "0.2",
    "CONSOLIDATOR_MAX_ATTEMPTS": "3", "CONSOLIDATOR_LOCK_TTL_SECONDS": str(LOCK_TTL_S),
}


# Counted beside the faults, but consequences rather than injected faults.
OBSERVATIONS = frozenset({"ingest invocations", "worker restarts", "batches DEAD", "dead batches redriven",
                          "partitions assigned", "commits logged", "worker exits"})


@dataclass(frozen=True)
class Scenario:
    """Which faults one run injects (intervals are seconds between two faults, drawn uniformly)."""

    name: str
    ingest_kill_p: float = 0.0  # chance an ingest invocation is SIGKILLed at a random moment
    flush_kill_every: tuple[float, float] | None = None
    crash_after_publish_p: float = 0.0
    db_kill_every: tuple[float, float] | None = None
    redis_kill_every: tuple[float, float] | None = None
    lockless_flushers: int = 1  # >1: that many flushers at once, none sharing a lock
    pause_past_ttl_every: tuple[float, float] | None = None
    sink_outage_s: float = 0.0  # sink down at least this long, and until a batch went DEAD; then redrive
    rate_limit: tuple[int, float] | None = None  # every group: at most N batches per P seconds
    completion: bool = False  # completion tracking on; an acker (killed at random) acks every member
    acker_kill_p: float = 0.0
    workers: int = 0  # >0: that many `consolidator worker` processes on a local Kafka instead (chaos/fleet.py)
    worker_kill_every: tuple[float, float] | None = None  # SIGKILL a random worker (restarted)
    worker_churn_every: tuple[float, float] | None = None  # add a worker or remove one (SIGTERM)


SCENARIOS = {s.name: s for s in (
    Scenario("ingest-kill", ingest_kill_p=0.35),
    Scenario("flush-kill", flush_kill_every=(0.3, 1.0), crash_after_publish_p=0.15),
    Scenario("db-kill", db_kill_every=(0.8, 2.0)),
    Scenario("lockless-flushers", lockless_flushers=3, pause_past_ttl_every=(0.4, 1.2)),
    Scenario("redis-kill", redis_kill_every=(0.4, 1.2)),
    Scenario("sink-outage", sink_outage_s=1.0),
    Scenario("rate-limit", rate_limit=(2, 1.0), lockless_flushers=2, flush_kill_every=(0.5, 1.5)),
    Scenario("completion-acks", completion=True, acker_kill_p=0.2, flush_kill_every=(0.8, 2.0),
             crash_after_publish_p=0.1),
)}


@dataclass
class RunResult:
    scenario: str
    seed: int
    events: int
    faults: dict[str, int] = field(default_factory=dict)
    violations: dict[str, list[str]] = field(default_factory=dict)
    republished_same_id: int = 0
    seconds: float = 0.0
    snapshot: Snapshot | None = None

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())

    @property
    def injected(self) -> int:
        return sum(n for k, n in self.faults.items() if k not in OBSERVATIONS)


class Run:
    def __init__(self, scenario: Scenario, seed: int, events: int, mariadb: MariaDB, redis: Redis,
                 workdir: Path, repo: Path) -> None:
        self.s, self.seed, self.events = scenario, seed, events
        self.mariadb, self.redis, self.repo = mariadb, redis, repo
        self.dir = workdir / f"{scenario.name}-{seed}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.database = f"chaos_{scenario.name.replace('-', '_')}_{seed}"
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.faults: dict[str, int] = {}
        self.sink_down = self.dir / "sink-down"
        self.errors: list[str] = []

    # -- set-up ------------------------------------------------------------------------------

    def env(self, redis_db: int = 0) -> dict[str, str]:
        env = dict(os.environ)
        env.update(POLICY_ENV)
        if self.s.rate_limit:
            env["CONSOLIDATOR_RATE_LIMIT_BATCHES"] = str(self.s.rate_limit[0])
            env["CONSOLIDATOR_RATE_LIMIT_PERIOD_SECONDS"] = str(self.s.rate_limit[1])
        env.update({
            "CONSOLIDATOR_DATABASE_URL": f"{self.mariadb.url_base}/{self.database}",
            "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{self.dir / 'dead-letter.jsonl'}",
            "CONSOLIDATOR_SINK_URL": f"file://{self.dir / 'batches.jsonl'}",
            "CONSOLIDATOR_REDIS_URL": f"redis://127.0.0.1:{self.redis.port}/{redis_db}",
            "CHAOS_SEED": str(self.seed), "CHAOS_SINK_DOWN": str(self.sink_down),
            "CHAOS_CRASH_AFTER_PUBLISH": str(self.s.crash_after_publish_p),
            "CONSOLIDATOR_COMPLETION_TRACKING": "true" if self.s.completion else "false",
            "CONSOLIDATOR_COMPLETION_SINK_URL": f"file://{self.dir / 'completions.jsonl'}",
            "CONSOLIDATOR_COMPLETION_LEASE_SECONDS": str(LEASE_S),
            "POWERTOOLS_TRACE_DISABLED": "1", "POWERTOOLS_LOG_LEVEL": "WARNING", "AWS_DEFAULT_REGION": "us-east-1",
            "PYTHONPATH": os.pathsep.join(p for p in (str(self.repo), env.get("PYTHONPATH", "")) if p),
        })
        return env

    def count(self, fault: str) -> None:
        self.faults[fault] = self.faults.get(fault, 0) + 1

    def create_database(self) -> None:
        self.mariadb.admin(f"DROP DATABASE IF EXISTS {self.database}")
        self.mariadb.admin(f"CREATE DATABASE {self.database} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        store = MySQLStore.from_url(f"{self.mariadb.url_base}/{self.database}")
        store.migrate(int(time.time() * 1000))
        store.close()

    # -- the moving parts ----------------------------------------------------------------------

    def flusher(self, worker: Worker) -> None:
        try:
            while not self.stop.is_set():
                if worker.invoke({"timeout_ms": int(FLUSH_TIMEOUT_S * 1000)}, timeout_s=FLUSH_TIMEOUT_S + 20) is None:
                    time.sleep(0.05)  # a lost invocation: the next scheduled one starts a new container
        except RuntimeError as exc:  # a worker that cannot start: the run must say so, not go on quietly
            self.errors.append(f"flusher: {exc}")

    def every(self, interval: tuple[float, float], action) -> threading.Thread:
        """Run ``action`` at intervals until the run stops; an action returns False when it found
        nothing to hit (no flusher ready yet), and the injector's thread is marked once one hit."""
        def loop() -> None:
            wait = self.rng.uniform(interval[0] / 4, interval[0])  # the first fault early: during the workload
            while not self.stop.wait(wait):
                wait = self.rng.uniform(*interval)
                try:
                    if action() is not False:
                        thread.injected = True
                except Exception as exc:  # noqa: BLE001 - a fault injector must never kill the run silently
                    self.errors.append(f"fault injector {action.__name__}: {type(exc).__name__}: {exc}")
                    return

        thread = threading.Thread(target=loop, daemon=True)
        thread.injected = False
        thread.start()
        return thread

    def keep_going_until(self, done, at_most_s: float, failure: str) -> None:
        """Let the run go on (its flushers, its faults) until ``done()`` or a harness error;
        ``failure`` becomes one when ``at_most_s`` passed without it."""
        deadline = time.monotonic() + at_most_s
        while not done() and not self.errors:
            if time.monotonic() > deadline:
                self.errors.append(failure)
                return
            time.sleep(0.05)

    def kill_database(self) -> None:
        self.mariadb.kill()
        self.count("database SIGKILL")
        time.sleep(self.rng.uniform(0.3, 1.2))
        self.mariadb.start()

    def sink_outage(self, dead_within_s: float = 60.0) -> None:
        """The sink is down for ``sink_outage_s`` and then until a batch went DEAD (past
        max_attempts), however slowly the flushers get their ticks in."""
        self.sink_down.touch()
        self.count("sink outage")
        time.sleep(self.s.sink_outage_s)
        deadline = time.monotonic() + dead_within_s
        while time.monotonic() < deadline:
            try:
                if self.query("SELECT COUNT(*) AS n FROM batches WHERE state = 'DEAD'")[0]["n"]:
                    break
            except pymysql.err.MySQLError:
                pass  # the database may be restarting; ask again
            time.sleep(0.2)
        self.sink_down.unlink(missing_ok=True)

    def kill_redis(self) -> None:
        self.redis.kill()
        self.count("redis SIGKILL")
        time.sleep(self.rng.uniform(0.3, 1.0))
        self.redis.start()

    # -- one run -------------------------------------------------------------------------------

    def execute(self) -> RunResult:
        started = time.monotonic()
        self.create_database()
        workload = make_workload(self.seed, self.events)
        ingest = Worker("ingest", self.repo, self.env(), self.dir / "ingest.log")
        flushers = [Worker("flush", self.repo, self.env(redis_db=i), self.dir / f"flush-{i}.log")
                    for i in range(self.s.lockless_flushers)]
        threads = [threading.Thread(target=self.flusher, args=(w,), daemon=True) for w in flushers]
        for t in threads:
            t.start()
        injectors = []
        if self.s.flush_kill_every:
            def kill_flusher() -> bool:
                ready = [w for w in flushers if w.ready and w.alive()]  # not one still booting
                if ready:
                    self.rng.choice(ready).kill()
                    self.count("flusher SIGKILL")
                return bool(ready)
            injectors.append(self.every(self.s.flush_kill_every, kill_flusher))
        if self.s.pause_past_ttl_every:
            def pause_flusher() -> bool:
                paused = self.rng.choice(flushers).pause(LOCK_TTL_S + self.rng.uniform(0.2, 1.0))
                if paused:
                    self.count("flusher SIGSTOP past lock TTL")
                return paused
            injectors.append(self.every(self.s.pause_past_ttl_every, pause_flusher))
        if self.s.db_kill_every:
            injectors.append(self.every(self.s.db_kill_every, self.kill_database))
        if self.s.redis_kill_every:
            injectors.append(self.every(self.s.redis_kill_every, self.kill_redis))

        def invoke_ingest(event: dict) -> dict | None:
            kill_after = None
            if self.s.ingest_kill_p and self.rng.random() < self.s.ingest_kill_p:
                kill_after = self.rng.uniform(0.0, 0.08)  # before, during or after the commit
                self.count("ingest SIGKILL")
            answer = ingest.invoke(event, timeout_s=30, kill_after_s=kill_after)
            if answer is not None and self.rng.random() < 0.05:
                self.count("ingest response lost")
                return None  # Lambda never saw the answer: the batch comes again
            if answer is not None and answer.get("batchItemFailures"):
                time.sleep(0.05)  # a dependency is down: Lambda backs off before retrying
            return answer

        acker = Acker(self, Worker("acks", self.repo, self.env(), self.dir / "acks.log")) if self.s.completion else None
        if acker is not None:
            threads.append(threading.Thread(target=acker.run_until, args=(self.stop,), daemon=True))
            threads[-1].start()
        esm = EventSourceEmulator(workload.records, invoke_ingest, self.rng)
        outage_at = workload.size // 3
        outage: threading.Thread | None = None
        while not esm.caught_up():
            if self.s.sink_outage_s and outage is None and sum(esm.committed.values()) >= outage_at:
                outage = threading.Thread(target=self.sink_outage, daemon=True)
                outage.start()
            esm.step()
        if outage is not None:
            outage.join()
        # a run shorter than an injector's first interval would otherwise test none of its faults
        self.keep_going_until(lambda: all(t.injected for t in injectors), 60,
                              "an injector found nothing to hit within 60 s after the workload")
        self.stop.set()
        for thread in injectors:
            thread.join(timeout=30)
        self.sink_down.unlink(missing_ok=True)
        if self.mariadb.process is None:
            self.mariadb.start()
        if self.redis.process is None:
            self.redis.start()
        ingest.close()
        for t in threads:
            t.join(timeout=60)
        self.faults["ingest invocations"] = esm.invocations
        self.recover(flushers[0])
        if acker is not None:
            acker.finish()
        for w in flushers:
            self.faults["worker restarts"] = self.faults.get("worker restarts", 0) + w.kills + w.crashes
            if self.s.crash_after_publish_p:
                self.faults["flusher SIGKILL after publish"] = self.faults.get(
                    "flusher SIGKILL after publish", 0) + w.crashes
            w.close()
        snapshot = self.snapshot(workload.produced, esm.acknowledged)
        violations = run_checks(snapshot)
        if self.errors:
            violations["harness"] = self.errors
        return RunResult(self.s.name, self.seed, workload.size, self.faults, violations,
                         republished_same_id=self.republished(snapshot), seconds=time.monotonic() - started,
                         snapshot=snapshot)

    def recover(self, flusher: Worker, timeout_s: float = 120.0) -> None:
        """Flush until nothing is PENDING or CLAIMED; revive DEAD batches through the CLI once."""
        deadline = time.monotonic() + timeout_s
        redriven = False
        while time.monotonic() < deadline:
            counts = self.query(  # a CLAIMED row is in its batch's state
                "SELECT COALESCE(b.state, r.status) AS status, COUNT(*) AS n FROM buffer_rows r"
                " LEFT JOIN batches b ON r.status = 'CLAIMED' AND b.batch_id = r.batch_id"
                " GROUP BY COALESCE(b.state, r.status) ORDER BY 1")
            states = self.query("SELECT state, COUNT(*) AS n FROM batches GROUP BY state ORDER BY state")
            open_rows = {r["status"]: r["n"] for r in counts if r["status"] in ("PENDING", "CLAIMED")}
            claimed = {r["state"]: r["n"] for r in states if r["state"] == "CLAIMED"}
            dead = {r["state"]: r["n"] for r in states if r["state"] == "DEAD"}
            if dead and not redriven:
                self.faults["batches DEAD"] = dead["DEAD"]
                self.redrive()
                redriven = True
                continue
            if not open_rows and not claimed:
                if self.s.sink_outage_s and not redriven:
                    self.errors.append("the sink outage made no batch DEAD: the scenario tested nothing")
                return
            time.sleep(0.6)  # let the hard window pass for the last groups
            flusher.invoke({"timeout_ms": int(FLUSH_TIMEOUT_S * 1000)}, timeout_s=30)
        self.errors.append(f"recovery did not drain the buffer within {timeout_s}s")

    def redrive(self) -> None:
        result = subprocess.run(
            [sys.executable, "-c", "from consolidator.cli import app; app()", "dlq", "redrive", "--batches", "--json"],
            env=self.env(), cwd=self.repo, capture_output=True, text=True, timeout=120, check=False,
        )
        self.count("dead batches redriven")
        if result.returncode not in (0, 1):
            self.errors.append(f"redrive exited {result.returncode}: {result.stderr[-500:]}")

    def query(self, statement: str) -> list[dict]:
        with pymysql.connect(host="127.0.0.1", port=self.mariadb.port, user="root", database=self.database,
                             cursorclass=pymysql.cursors.DictCursor) as conn, conn.cursor() as cur:
            cur.execute(statement)
            return list(cur.fetchall())

    def snapshot(self, produced, acknowledged) -> Snapshot:
        def raw(name: str) -> bytes:
            path = self.dir / name
            return path.read_bytes() if path.exists() else b""

        rows = self.query(
            "SELECT r.src_topic, r.src_partition, r.src_offset, r.group_key, r.item_id, r.batch_id,"
            " COALESCE(b.state, r.status) AS status"  # a CLAIMED row is in its batch's state
            " FROM buffer_rows r LEFT JOIN batches b ON r.status = 'CLAIMED' AND b.batch_id = r.batch_id"
            " ORDER BY r.src_topic, r.src_partition, r.src_offset")
        batches = self.query("SELECT batch_id, group_key, state, last_error, claimed_at_ms, kind FROM batches"
                             " ORDER BY batch_id")
        rate = None if self.s.rate_limit is None else (self.s.rate_limit[0], round(self.s.rate_limit[1] * 1000))
        return Snapshot(produced, acknowledged, raw("batches.jsonl"), raw("dead-letter.jsonl"), rows, batches,
                        rate_limit=rate, completions_raw=raw("completions.jsonl") if self.s.completion else None)

    @staticmethod
    def republished(snapshot: Snapshot) -> int:
        lines = [line for line in snapshot.output_raw.split(b"\n") if line]
        return len(lines) - len(set(lines))

