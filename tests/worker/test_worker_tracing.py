"""The worker traces as the functions do: its ingest span names its consumer group and continues
the producer's trace from the Kafka ``traceparent`` header, and the publish span links to it."""

from __future__ import annotations

from support import order_value
from worker_support import running, wait_for

PARENT = f"00-{'d' * 32}-{'4' * 16}-01"


def test_the_worker_continues_the_producers_trace(kafka, topic, worker_env, store, spans):
    for n in range(3):
        kafka.producer.produce(topic, key=b"WH-1", value=order_value(location="WH-1", order=f"O{n}"),
                               headers=[("traceparent", PARENT.encode())], partition=0)
    assert kafka.producer.flush(30) == 0
    with running(worker_env):
        published = wait_for(lambda: [s for s in spans.get_finished_spans() if s.name.startswith("send ")],
                             60, "a publish span")
    ingested = [s for s in spans.get_finished_spans() if s.name == f"process {topic}"]
    assert ingested and all(s.context.trace_id == int("d" * 32, 16) for s in ingested)
    assert {s.attributes["messaging.consumer.group.name"] for s in ingested} == {
        worker_env["CONSOLIDATOR_KAFKA_GROUP_ID"]}
    assert published[0].context.trace_id == int("d" * 32, 16)
    assert [link.context.span_id for link in published[0].links] == [int("4" * 16, 16)]
