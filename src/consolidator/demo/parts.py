"""The demo's moving parts: librdkafka's mock cluster, the synthetic producer, the event-source
emulator in front of the real ingest handler, the flush scheduler and the output reader."""

from __future__ import annotations

import logging
import threading
import time

from consolidator.demo.check import OutBatch, Produced
from consolidator.demo.config import INPUT_TOPIC, OUTPUT_TOPIC, DemoConfig, DemoError
from consolidator.demo.lambda_context import LocalLambdaContext
from consolidator.demo.synthetic import Message
from consolidator.rules.events import KafkaRecord
from consolidator.sources.msk import event_from_records
from consolidator.support import tracing

_quiet = logging.getLogger("consolidator.demo.kafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False



class MockKafka:
    """librdkafka's mock cluster; alive as long as this object's producer is."""

    def __init__(self, brokers: int = 3) -> None:
        from confluent_kafka import Producer

        self._owner = Producer({"test.mock.num.brokers": brokers, "logger": _quiet})
        metadata = self._owner.list_topics(timeout=10)
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in sorted(metadata.brokers.values(), key=lambda b: b.id))

    def partitions(self, topic: str) -> list[int]:
        metadata = self._owner.list_topics(topic, timeout=10)
        return sorted(metadata.topics[topic].partitions)


class SyntheticProducer(threading.Thread):
    """Produces the bursts with pauses; records where every message landed."""

    def __init__(self, bootstrap: str, plan: list[list[Message]], gaps: list[float]) -> None:
        super().__init__(name="demo-producer", daemon=True)
        from confluent_kafka import Producer

        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                   "linger.ms": 5, "logger": _quiet})
        self.plan, self.gaps = plan, gaps
        self.produced: list[Produced] = []
        self.sent = 0
        self.error: str | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            for index, burst in enumerate(self.plan):
                span = tracing.start_send_span(INPUT_TOPIC, "produce")  # one per burst, while tracing is on
                headers = None if span is None else [("traceparent", tracing.traceparent_of(span).encode())]
                for message in burst:
                    self._produce(message, headers)
                    self._producer.poll(0)
                if self._producer.flush(30) != 0:
                    raise DemoError("the synthetic producer could not deliver a burst")
                if span is not None:
                    span.set_attribute("messaging.batch.message_count", len(burst))
                    span.end()
                if index < len(self.gaps):
                    time.sleep(self.gaps[index])
        except Exception as exc:  # noqa: BLE001 - re-raised by the main thread as DemoError
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.done.set()

    def close(self) -> None:
        self._producer.flush(10)
        del self._producer  # destroyed before the mock cluster goes away

    def _produce(self, message: Message, headers: list | None = None) -> None:
        timestamp_ms = int(time.time() * 1000)  # CreateTime: the event time latency is measured from

        def delivered(err, msg) -> None:
            if err is not None:
                self.error = f"delivery failed: {err}"
                return
            self.produced.append(Produced((msg.topic(), msg.partition(), msg.offset()), timestamp_ms,
                                          message.group_key, message.item_id, message.poison))

        while True:
            try:
                self._producer.produce(INPUT_TOPIC, key=message.key, value=message.value, timestamp=timestamp_ms,
                                       headers=headers, on_delivery=delivered)
                break
            except BufferError:
                self._producer.poll(0.1)
        self.sent += 1


class EventSourceEmulator:
    """A small stand-in for Lambda's MSK event source mapping (see the module docstring)."""

    def __init__(self, bootstrap: str, partitions: list[int], handler, config: DemoConfig) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self._tp = TopicPartition
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": "consolidator-demo-esm", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "logger": _quiet,
        })
        self.partitions = partitions
        self.next_offset = dict.fromkeys(partitions, 0)
        self._consumer.assign([TopicPartition(INPUT_TOPIC, p, 0) for p in partitions])
        self.handler = handler
        self.config = config
        self.invocations = 0
        self.redeliveries = 0
        self.failed_items = 0
        self.rereads = 0
        self.records_delivered = 0

    def caught_up(self) -> bool:
        for p in self.partitions:
            _low, high = self._consumer.get_watermark_offsets(self._tp(INPUT_TOPIC, p), timeout=5, cached=False)
            if self.next_offset[p] < high:
                return False
        return True

    def poll_batch(self) -> list[KafkaRecord]:
        records: list[KafkaRecord] = []
        deadline = time.monotonic() + self.config.esm_batch_window_s
        while len(records) < self.config.esm_batch_size:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            message = self._consumer.poll(min(left, 0.1))
            if message is None:
                continue
            if message.error():
                raise DemoError(f"input consumer failed: {message.error()}")
            if message.offset() < self.next_offset[message.partition()]:
                continue  # already delivered and committed
            records.append(KafkaRecord(
                message.topic(), message.partition(), message.offset(), message.timestamp()[1], message.key(),
                message.value(), tuple((k, v or b"") for k, v in message.headers() or ()),
            ))
        return records

    def step(self, on_failure=None) -> int:
        """One poll + invocation. Returns the number of records delivered."""
        records = self.poll_batch()
        if not records:
            return 0
        event = event_from_records(records, "arn:aws:kafka:local:000000000000:cluster/consolidator-demo/0")
        self.invocations += 1
        response = self.handler(event, LocalLambdaContext(function_name="consolidator-ingest"))
        if self.config.redeliver_every and self.invocations % self.config.redeliver_every == 0:
            self.redeliveries += 1  # at-least-once: the same batch again must change nothing
            self.handler(event, LocalLambdaContext(function_name="consolidator-ingest"))
        failures = response.get("batchItemFailures", [])
        lowest: dict[int, int] = {}
        for failure in failures:
            ident = failure["itemIdentifier"]
            partition = int(ident["partition"].rsplit("-", 1)[1])
            lowest[partition] = min(int(ident["offset"]), lowest.get(partition, int(ident["offset"])))
        for record in records:
            if record.partition not in lowest:
                self.next_offset[record.partition] = max(self.next_offset[record.partition], record.offset + 1)
        if lowest:
            self.failed_items += len(failures)
            self.rereads += len(lowest)
            for partition, offset in lowest.items():
                self.next_offset[partition] = offset
            # Re-read every failed partition from its lowest failed offset (like the ESM does).
            self._consumer.assign([self._tp(INPUT_TOPIC, p, self.next_offset[p]) for p in self.partitions])
            if on_failure:
                on_failure()
        delivered = sum(1 for r in records if r.partition not in lowest or r.offset < lowest[r.partition])
        self.records_delivered += delivered
        return delivered

    def close(self) -> None:
        self._consumer.close()


class FlushScheduler(threading.Thread):
    """Invokes the real flush handler back to back, like a schedule firing once per timeout."""

    def __init__(self, handler, invocation_s: float) -> None:
        super().__init__(name="demo-flush", daemon=True)
        self.handler, self.invocation_s = handler, invocation_s
        self.stop = threading.Event()
        self.totals = {"invocations": 0, "ticks": 0, "published": 0, "dead": 0, "publish_failures": 0, "skipped": 0}
        self.error: str | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                result = self.handler({}, LocalLambdaContext("consolidator-flush", round(self.invocation_s * 1000)))
                self.totals["invocations"] += 1
                for key in ("ticks", "published", "dead", "publish_failures", "skipped"):
                    self.totals[key] += int(result.get(key, 0))
        except Exception as exc:  # noqa: BLE001 - re-raised by the main thread as DemoError
            self.error = f"{type(exc).__name__}: {exc}"


def read_output(bootstrap: str, topic: str = OUTPUT_TOPIC, idle_s: float = 2.0) -> list[OutBatch]:
    """Every message of the output topic, from the beginning, as :class:`OutBatch`."""
    import json

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "consolidator-demo-reader",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "logger": _quiet})
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions) if topic in metadata.topics else []
        high = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)[1]
                for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        out: list[OutBatch] = []
        position = dict.fromkeys(partitions, 0)
        last = time.monotonic()
        while any(position[p] < high[p] for p in partitions) and time.monotonic() - last < idle_s:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                raise DemoError(f"output consumer failed: {message.error()}")
            last = time.monotonic()
            position[message.partition()] = message.offset() + 1
            body = json.loads(message.value())
            headers = dict(message.headers() or ())
            header = headers.get("batch_id", b"").decode()
            if header != body.get("batch_id"):
                raise DemoError(f"batch_id header {header!r} differs from the body's {body.get('batch_id')!r}")
            parent = headers.get("traceparent")
            span = tracing.start_receive_span(topic, message.partition(), message.offset(), "consolidator-demo-reader",
                                              header, None if parent is None else parent.decode("ascii", "replace"))
            out.append(OutBatch(body, message.timestamp()[1]))
            if span is not None:  # the downstream consumer's work on the batch, in the batch's trace
                span.end()
        return out
    finally:
        consumer.close()
