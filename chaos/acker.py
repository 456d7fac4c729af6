"""Downstream's side of a chaos run's completion tracking: the acks through the real handler."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from chaos.process import Worker

LEASE_S = 1.0  # the completion lease the run sets: a completion whose publisher died is re-published after it


class Run(Protocol):
    """What the acker uses of its chaos run (chaos.scenarios.Run)."""

    dir: Path
    rng: random.Random
    s: Any  # the scenario: its acker_kill_p
    errors: list[str]
    faults: dict[str, int]

    def count(self, fault: str) -> None: ...

    def query(self, statement: str) -> list[dict]: ...


class Acker:
    """Downstream's side of completion tracking: reads the published batches, acknowledges
    every member (shuffled, in several acks, some twice) through the real acks handler in a
    child process that is SIGKILLed at random; refused or lost acks come again, as SQS would
    redeliver them."""

    def __init__(self, run: Run, worker: Worker) -> None:
        self.run, self.worker = run, worker
        self.seen: set[str] = set()
        self.queue: list[str] = []
        self.attempts: dict[str, int] = {}

    def feed(self) -> None:
        path = self.run.dir / "batches.jsonl"
        if not path.exists():
            return
        for line in path.read_bytes().split(b"\n")[:-1]:
            message = json.loads(line)
            if not message.get("completion_tracking") or message["batch_id"] in self.seen:
                continue
            self.seen.add(message["batch_id"])
            indexes = list(range(len(message["members"])))
            self.run.rng.shuffle(indexes)
            indexes += self.run.rng.sample(indexes, len(indexes) // 10)  # some members acknowledged twice
            while indexes:
                take = self.run.rng.randint(1, 5)
                chunk, indexes = indexes[:take], indexes[take:]
                ack = {"batch_id": message["batch_id"], "members": chunk}
                if "ack_token" in message:  # what proves the acker received the batch
                    ack["ack_token"] = message["ack_token"]
                self.queue.append(json.dumps(ack))

    def step(self) -> bool:
        """One SQS delivery of up to 10 acks; False when there was nothing to send."""
        if not self.queue:
            return False
        bodies, self.queue = self.queue[:10], self.queue[10:]
        event = {"Records": [{"messageId": str(i), "receiptHandle": str(i), "body": body, "attributes": {},
                              "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
                              "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:acks", "awsRegion": "us-east-1"}
                             for i, body in enumerate(bodies)]}
        kill_after = None
        if self.run.s.acker_kill_p and self.run.rng.random() < self.run.s.acker_kill_p:
            kill_after = self.run.rng.uniform(0.0, 0.05)
            self.run.count("acker SIGKILL")
        answer = self.worker.invoke(event, timeout_s=30, kill_after_s=kill_after)
        failed = (range(len(bodies)) if answer is None
                  else [int(f["itemIdentifier"]) for f in answer.get("batchItemFailures", [])])
        for index in failed:  # redelivered, like SQS after the visibility timeout
            body = bodies[index]
            self.attempts[body] = self.attempts.get(body, 0) + 1
            if self.attempts[body] > 50:
                self.run.errors.append(f"an ack was refused 50 times: {body[:120]}")
                continue
            self.queue.append(body)
        return True

    def run_until(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.feed()
            if not self.step():
                time.sleep(0.05)

    def finish(self, timeout_s: float = 120.0) -> None:
        """Acknowledge everything published, then sweep until every completion is confirmed."""
        deadline = time.monotonic() + timeout_s
        self.feed()
        while self.queue and time.monotonic() < deadline:
            self.step()
        while time.monotonic() < deadline:
            due = self.run.query("SELECT COUNT(*) AS n, MAX(outbox_attempt_ms) AS last FROM completion_trackers"
                                 " WHERE acked_count = member_count AND outbox <> 'PUBLISHED'")[0]
            if not due["n"]:
                break
            # the sweep re-publishes a completion once its last attempt is a lease old: wait until
            # every one left is (their publishers died), not a fixed time
            last = time.time() if due["last"] is None else due["last"] / 1000
            time.sleep(max(0.0, last + LEASE_S + 0.05 - time.time()))
            self.worker.invoke({"source": "aws.events", "detail-type": "Scheduled Event"}, timeout_s=30)
        else:
            self.run.errors.append("completions were not all published within the recovery time")
        self.faults_from_worker()
        self.worker.close()

    def faults_from_worker(self) -> None:
        self.run.faults["worker restarts"] = self.run.faults.get("worker restarts", 0) + self.worker.kills
        if self.worker.crashes:  # the fault hook: killed right after a completion was published
            self.run.faults["acker SIGKILL after publish"] = self.worker.crashes
