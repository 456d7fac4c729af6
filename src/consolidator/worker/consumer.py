"""The poll loop: the only thread that uses the Kafka consumer. It fetches, hands records to the
ledger, pauses and resumes partitions as the ledger says, commits durable offsets, and runs the
rebalance callbacks. It never waits on the database, a sink or the flush: a write runs on the
writer's thread, so the loop polls well within ``max.poll.interval.ms`` however slow the write.

Offsets: the client stores and commits nothing by itself (``enable.auto.commit`` and
``enable.auto.offset.store`` off). The loop commits what the ledger says is durable: every
``commit_interval_s`` (asynchronously), on a revoke (synchronously, for the revoked partitions,
after their write in flight finished or was abandoned) and at shutdown; never on a lost
partition. Each confirmed commit is logged (``offsets committed``, with the reason and each
partition's offset) and counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from consolidator.rules.errors import ConfigurationError
from consolidator.services.metrics import MetricsRecorder
from consolidator.support.redact import masked
from consolidator.worker.ledger import Ledger, Partition
from consolidator.worker.metrics import PrometheusRegistry, partition_labels
from consolidator.worker.records import read_messages

log = logging.getLogger(__name__)
POLL_TIMEOUT_S = 0.1  # one consume call waits at most this long for records
FETCH_MAX = 1000  # records one consume call returns at most (one while the ledger is at its memory bound)
GAUGES_EVERY_S = 1.0  # lag, pause and buffer gauges
ERROR_LOG_EVERY_S = 60.0  # a repeated client error is logged once per this long


@dataclass(frozen=True)
class ConsumerPlan:
    """What the loop needs of the settings: the client's configuration (secrets included; never
    logged), the topics or the pattern, whether rebalances are incremental, the timings."""

    config: dict = field(repr=False)
    topics: list[str]
    pattern: str | None
    cooperative: bool
    commit_interval_s: float
    write_wait_s: float


def _tps(partitions: list[Partition], offsets: dict[Partition, int] | None = None) -> list[TopicPartition]:
    if offsets is None:
        return [TopicPartition(t, p) for t, p in partitions]
    return [TopicPartition(t, p, offsets[(t, p)]) for t, p in partitions]


def _listed(offsets: dict[Partition, int]) -> list[dict]:
    return [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())]


class PollLoop:
    def __init__(self, plan: ConsumerPlan, ledger: Ledger, metrics: PrometheusRegistry | MetricsRecorder,
                 consumer_factory: Callable[[dict], Consumer] = Consumer) -> None:
        self.plan = plan
        self.ledger = ledger
        self.metrics = metrics
        self._factory = consumer_factory
        self.consumer: Consumer | None = None
        self.beat = time.monotonic()  # the last loop iteration (liveness)
        self.rebalances: list[tuple[str, list[Partition]]] = []  # (assigned|revoked|lost, partitions)
        self.fatal: str | None = None  # a fatal client error: the worker stops
        self._stop = threading.Event()
        self._deadline = float("inf")  # monotonic: when the shutdown must be over
        self._closing = False
        self._errors_logged: dict[str, float] = {}
        self._gauged: set[Partition] = set()
        self._thread = threading.Thread(target=self._run, name="consolidator-poll", daemon=True)

    # -- control (any thread) ---------------------------------------------------------------

    def open(self) -> None:
        """Create the client (in the caller's thread: a configuration librdkafka refuses is an
        error at start-up, not in the loop). Raises :class:`ConfigurationError`."""
        try:
            self.consumer = self._factory({**self.plan.config, "on_commit": self._on_commit})
        except (KafkaException, ValueError, TypeError) as exc:
            raise ConfigurationError(f"invalid configuration: the Kafka consumer refused it: {masked(str(exc))}"
                                     " (check CONSOLIDATOR_KAFKA_* and CONSOLIDATOR_KAFKA_CONFIG)") from None

    def start(self) -> None:
        if self.consumer is None:
            self.open()
        self._thread.start()

    def stop(self, deadline: float) -> None:
        """Stop fetching; the loop then settles, commits and leaves the group before ``deadline``."""
        self._deadline = deadline
        self._stop.set()

    def join(self, timeout_s: float) -> bool:
        self._thread.join(max(0.0, timeout_s))
        return not self._thread.is_alive()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    # -- the loop ---------------------------------------------------------------------------

    def _run(self) -> None:
        consumer = self.consumer
        try:
            consumer.subscribe(self.plan.topics or [self.plan.pattern], on_assign=self._on_assign,
                               on_revoke=self._on_revoke, on_lost=self._on_lost)
            log.info("consumer subscribed", extra={"topics": self.plan.topics, "pattern": self.plan.pattern,
                                                   "group_id": self.plan.config.get("group.id")})
            self._loop(consumer)
        except Exception:
            # a bug or a client failure: logged with its traceback; the worker stops with exit 1
            log.exception("poll loop failed; the worker stops")
            self.fatal = self.fatal or "the poll loop failed"
        finally:
            self._shutdown(consumer)

    def _loop(self, consumer: Consumer) -> None:
        next_commit = time.monotonic() + self.plan.commit_interval_s
        next_gauges = 0.0
        while not self._stop.is_set():
            if self.ledger.wait_for_room(POLL_TIMEOUT_S):
                messages = consumer.consume(num_messages=FETCH_MAX, timeout=POLL_TIMEOUT_S)
            else:  # at the memory bound: still poll (the group, the callbacks), taking one record at most
                messages = consumer.consume(num_messages=1, timeout=0)
            now = self.beat = time.monotonic()
            items, errors = read_messages(messages)
            for error in errors:
                self._client_error(error)
            if items:
                self.ledger.add(items)
            self._apply_pauses(consumer)
            if now >= next_commit:
                next_commit = now + self.plan.commit_interval_s
                self._commit(self.ledger.commit_offsets(), "interval", asynchronous=True)
            if now >= next_gauges:
                next_gauges = now + GAUGES_EVERY_S
                self._gauges(consumer)

    def _apply_pauses(self, consumer: Consumer) -> None:
        pause, resume = self.ledger.pause_plan()
        if pause:
            consumer.pause(_tps(pause))
            log.info("partitions paused", extra={"partitions": [{"topic": t, "partition": p} for t, p in pause]})
        if resume:
            consumer.resume(_tps(resume))
            log.info("partitions resumed", extra={"partitions": [{"topic": t, "partition": p} for t, p in resume]})

    def _client_error(self, error: KafkaError) -> None:
        if error.fatal():
            self.fatal = f"fatal Kafka client error: {error.str()}"
            log.error("fatal Kafka client error; the worker stops", extra={"error": error.str()})
            self._stop.set()
            return
        key = f"{error.code()}:{error.str()}"
        now = time.monotonic()
        if now - self._errors_logged.get(key, -ERROR_LOG_EVERY_S) >= ERROR_LOG_EVERY_S:
            self._errors_logged[key] = now
            log.warning("Kafka client error", extra={"error": error.str(), "code": error.name()})

    def _shutdown(self, consumer: Consumer) -> None:
        """Settle the write in flight (or abandon it at the bound), commit what is durable, leave
        the group (the close revokes every partition: nothing more to commit then)."""
        self._closing = True
        self.ledger.close()
        assigned = self.ledger.assigned()
        wait = min(self.plan.write_wait_s, max(0.0, self._deadline - time.monotonic() - 1.0))
        if not self.ledger.settle(assigned, wait):
            log.warning("shutdown: the write in flight is abandoned; its records are delivered again (replays)",
                        extra={"waited_s": round(wait, 3)})
        self._commit(self.ledger.commit_offsets(), "shutdown", asynchronous=False)
        consumer.close()
        log.info("consumer closed; left the group")

    # -- offsets ----------------------------------------------------------------------------

    def _commit(self, offsets: dict[Partition, int], reason: str, *, asynchronous: bool) -> None:
        if not offsets:
            return
        consumer = self.consumer
        partitions = sorted(offsets)
        try:
            result = consumer.commit(offsets=_tps(partitions, offsets), asynchronous=asynchronous)
        except KafkaException as exc:
            self.metrics.add_metric(name="OffsetCommitFailures", unit="Count", value=len(offsets))
            log.warning("offsets not committed; committed again later", extra={"reason": reason, "error": str(exc),
                                                                                "offsets": _listed(offsets)})
            return
        if not asynchronous:
            self._confirmed(result, reason)

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if error is not None:
            self.metrics.add_metric(name="OffsetCommitFailures", unit="Count", value=len(partitions))
            log.warning("offsets not committed; committed again later",
                        extra={"reason": "interval", "error": error.str()})
            return
        self._confirmed(partitions, "interval")

    def _confirmed(self, partitions: list[TopicPartition], reason: str) -> None:
        done = {(tp.topic, tp.partition): tp.offset for tp in partitions if tp.error is None and tp.offset >= 0}
        refused = [tp for tp in partitions if tp.error is not None]
        if done:
            self.ledger.committed(done)
            self.metrics.add_metric(name="OffsetsCommitted", unit="Count", value=len(done))
            log.info("offsets committed", extra={"reason": reason, "offsets": _listed(done)})
        if refused:
            self.metrics.add_metric(name="OffsetCommitFailures", unit="Count", value=len(refused))
            log.warning("offsets not committed; committed again later",
                        extra={"reason": reason, "errors": [{"topic": tp.topic, "partition": tp.partition,
                                                             "error": tp.error.str()} for tp in refused]})

    # -- rebalances (called inside consume, on this thread) -----------------------------------

    def _on_assign(self, consumer: Consumer, assigned: list[TopicPartition]) -> None:
        partitions = [(tp.topic, tp.partition) for tp in assigned]
        self.ledger.assign(partitions)
        if self.plan.cooperative:
            consumer.incremental_assign(assigned)
        else:
            consumer.assign(assigned)
        # the client forgets pauses on a new assignment: pause again what the ledger holds paused
        paused = self.ledger.paused()
        if paused:
            consumer.pause(_tps(paused))
        self._rebalanced("assigned", partitions, "PartitionsAssigned")

    def _on_revoke(self, consumer: Consumer, revoked: list[TopicPartition]) -> None:
        """Let the write in flight for these partitions finish (or abandon it at the bound),
        commit what is durable of them, then forget them."""
        partitions = [(tp.topic, tp.partition) for tp in revoked]
        wait = 0.0 if self._closing else self.plan.write_wait_s
        if not self.ledger.settle(partitions, wait) and not self._closing:
            log.warning("revoke: the write in flight is abandoned; its records are delivered again to the next"
                        " owner (replays)", extra={"waited_s": wait})
        self._commit(self.ledger.commit_offsets(partitions), "revoke", asynchronous=False)
        self.ledger.drop(partitions)
        self._rebalanced("revoked", partitions, "PartitionsRevoked")

    def _on_lost(self, consumer: Consumer, lost: list[TopicPartition]) -> None:
        """Lost (the group moved on without us): commit nothing, forget them."""
        partitions = [(tp.topic, tp.partition) for tp in lost]
        self.ledger.drop(partitions)
        log.warning("partitions lost; nothing committed for them (their records are delivered again)",
                    extra={"partitions": [{"topic": t, "partition": p} for t, p in partitions]})
        self._rebalanced("lost", partitions, "PartitionsLost")

    def _rebalanced(self, kind: str, partitions: list[Partition], metric: str) -> None:
        self.rebalances.append((kind, partitions))
        self.metrics.add_metric(name=metric, unit="Count", value=len(partitions))
        if partitions:
            log.info(f"partitions {kind}", extra={"partitions": [{"topic": t, "partition": p}
                                                                for t, p in partitions]})

    # -- gauges -----------------------------------------------------------------------------

    def _gauges(self, consumer: Consumer) -> None:
        if not isinstance(self.metrics, PrometheusRegistry):
            return
        views = self.ledger.snapshot()
        self.metrics.set("AssignedPartitions", len(views))
        self.metrics.set("BufferedRecords", sum(v.held for v in views.values()))
        for partition in self._gauged - views.keys():
            self.metrics.forget("PartitionPaused", partition_labels(*partition))
            self.metrics.forget("PartitionLag", partition_labels(*partition))
        self._gauged = set(views)
        for partition, view in views.items():
            labels = partition_labels(*partition)
            self.metrics.set("PartitionPaused", 1 if view.paused else 0, labels)
            start = view.durable if view.durable is not None else view.first_held
            try:
                if start is None:  # nothing fetched yet: where the client will fetch from
                    start = consumer.position([TopicPartition(*partition)])[0].offset
                _, high = consumer.get_watermark_offsets(TopicPartition(*partition), cached=True)
            except KafkaException:
                continue
            if start >= 0 and high >= 0:
                self.metrics.set("PartitionLag", max(0, high - start), labels)
