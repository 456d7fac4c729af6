"""A published batch carries its publish span's ``traceparent`` where each destination has room
for it outside the message (a Kafka header, an SQS message attribute, EventBridge's trace
header), so a downstream consumer continues the trace; without one (tracing off) nothing is added."""

from __future__ import annotations

import uuid

from test_sinks_aws import aws, receive_all  # noqa: F401 (the aws fixture)
from test_sinks_kafka import bootstrap, consume  # noqa: F401 (the bootstrap fixture)

from consolidator.sinks import OutgoingBatch
from consolidator.sinks.eventbridge import EventBridgeSink, xray_header
from consolidator.sinks.kafka import KafkaSink
from consolidator.sinks.sqs import SqsSink
from consolidator.support import tracing

PARENT = f"00-{'c' * 32}-{'3' * 16}-01"
BODY = b'{"batch_id":"x"}'


def test_kafka_message_carries_the_traceparent_header_and_a_consumer_continues_it(bootstrap):  # noqa: F811
    topic = f"batches-{uuid.uuid4().hex[:8]}"
    sink = KafkaSink(bootstrap, topic, flush_timeout_s=10)
    assert sink.publish([OutgoingBatch("a" * 32, "WH-1", BODY, PARENT), OutgoingBatch("b" * 32, "WH-2", BODY)]) == {}
    sink.close()
    headers = {m.key(): dict(m.headers()) for m in consume(bootstrap, topic, 2)}
    assert headers == {b"WH-1": {"batch_id": b"a" * 32, "traceparent": PARENT.encode()},
                       b"WH-2": {"batch_id": b"b" * 32}}
    context = tracing.context_of(headers[b"WH-1"]["traceparent"].decode())
    from opentelemetry.trace import get_current_span

    assert get_current_span(context).get_span_context().trace_id == int("c" * 32, 16)
    assert tracing.context_of("00-malformed") is None and tracing.context_of(None) is None


def test_sqs_message_carries_the_traceparent_attribute(aws):  # noqa: F811
    url = aws.create_queue(QueueName="batches")["QueueUrl"]
    assert SqsSink(url).publish([OutgoingBatch("a" * 32, "WH-1", BODY, PARENT)]) == {}
    (message,) = receive_all(aws, url)
    assert message["MessageAttributes"]["traceparent"] == {"DataType": "String", "StringValue": PARENT}
    assert message["Body"] == BODY.decode()


def test_eventbridge_entry_carries_the_context_as_its_trace_header():
    sent = []

    class Client:
        def put_events(self, Entries):
            sent.extend(Entries)
            return {"Entries": [{"EventId": str(i)} for i in range(len(Entries))]}

    sink = EventBridgeSink("bus", client=Client())
    assert sink.publish([OutgoingBatch("a" * 32, "WH-1", BODY, PARENT), OutgoingBatch("b" * 32, "WH-2", BODY)]) == {}
    assert sent[0]["TraceHeader"] == f"Root=1-{'c' * 8}-{'c' * 24};Parent={'3' * 16};Sampled=1"
    assert "TraceHeader" not in sent[1] and sent[0]["Detail"] == BODY.decode()
    assert xray_header(f"00-{'c' * 32}-{'3' * 16}-00").endswith("Sampled=0")
