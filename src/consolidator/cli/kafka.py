"""``consolidator kafka``: a local Kafka for trying things (librdkafka's mock cluster) and a
producer of JSON-lines files to it (or to any Kafka)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from consolidator.cli.base import (
    EXIT_FAILED,
    JsonOption,
    bounded,
    emit_json,
    err,
    out,
    say_error,
    topic_name,
)
from consolidator.cli.render import echo
from consolidator.support import tracing

kafka_app = typer.Typer(help="A local Kafka (librdkafka's mock cluster) and a producer of event files.",
                        no_args_is_help=True)


@kafka_app.command("serve")
def serve(
    brokers: Annotated[int, typer.Option("--brokers", parser=bounded(1, 16, integer=True),
                                         help="Brokers of the mock cluster (1 to 16).")] = 3,
) -> None:
    """Start a local Kafka cluster in this process (librdkafka's mock cluster: the real Kafka
    protocol, in memory, nothing kept after it stops), print its bootstrap servers on stdout (the
    first line, for scripts) and run until stopped (Ctrl-C or SIGTERM: a clean exit, one line).
    Topics are created on first use (librdkafka's default: 4 partitions). Point `kafka produce`, `spark stream --bootstrap-servers`
    or CONSOLIDATOR_KAFKA_BOOTSTRAP at the printed address. Needs no CONSOLIDATOR_* variable."""
    from confluent_kafka import KafkaException, Producer

    from consolidator.support.kafkalog import client_logging

    stop = threading.Event()
    caught: list[str] = []

    def on_signal(number, _frame) -> None:
        caught.append(signal.Signals(number).name)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        owner = Producer({**client_logging(), "test.mock.num.brokers": brokers})
        try:
            metadata = owner.list_topics(timeout=10)
        except KafkaException as exc:
            say_error("the mock cluster did not start", exc)
            raise typer.Exit(EXIT_FAILED) from None
        bootstrap = ",".join(f"{b.host}:{b.port}" for b in sorted(metadata.brokers.values(), key=lambda b: b.id))
        echo(bootstrap)  # stdout, flushed: the one line a script reads
        err.print(f"local Kafka (librdkafka mock cluster, {brokers} brokers) at {bootstrap}; "
                  "Ctrl-C or SIGTERM to stop", highlight=False, soft_wrap=True)
        while not stop.is_set():
            owner.poll(0.2)  # hands librdkafka's log lines to the logger
            stop.wait(0.3)
        del owner  # the cluster lives as long as its producer
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    err.print(f"local Kafka at {bootstrap} stopped ({caught[0] if caught else 'done'}); its topics are gone",
              highlight=False, soft_wrap=True)


def _stamp(line: bytes, path: tuple[str, ...]) -> int:
    """The value's event time at ``path`` (epoch ms); ``ValueError`` naming why it cannot be read."""
    from consolidator.rules.event_time import event_time_ms
    from consolidator.sources.files import parse_json

    return event_time_ms(parse_json(line), path)


def _key(line: bytes, field: str | None) -> bytes | None:
    """The value's ``field`` as the message key (so one group stays on one partition), if any."""
    if not field:
        return None
    from consolidator.sources.files import parse_json

    try:
        document = parse_json(line)
    except ValueError:
        return None  # not JSON (or nested too deeply): produced as it is, a poison record for the consumer
    key = document.get(field) if isinstance(document, dict) else None
    return None if key is None or isinstance(key, (dict, list)) else str(key).encode()


@kafka_app.command("produce")
def produce(
    file: Annotated[Path, typer.Argument(help="JSON lines, each line one event value.")],
    bootstrap_servers: Annotated[str, typer.Option(
        "--bootstrap-servers", envvar="CONSOLIDATOR_KAFKA_BOOTSTRAP", help="e.g. what `kafka serve` printed.")],
    topic: Annotated[str, typer.Option("--topic", envvar="CONSOLIDATOR_SOURCE_TOPIC", parser=topic_name,
                                       help="A Kafka topic name.")],
    key_field: Annotated[str, typer.Option(
        "--key-field", envvar="CONSOLIDATOR_GROUP_KEY_FIELD",
        help="The message key is this field of the value (the group key); empty: no key.")] = "location_id",
    timestamp_field: Annotated[str | None, typer.Option(
        "--timestamp-field", envvar="CONSOLIDATOR_EVENT_TIME_FIELD",
        help="The record timestamp is this field of the value (a path; epoch ms or ISO-8601 with a zone); "
             "a line without a readable one is stamped now and counted. Default: stamped now.")] = None,
    timeout_seconds: Annotated[float, typer.Option(
        "--timeout-seconds", parser=bounded(0.1, 3600, " seconds"),
        help="Wait this long for every acknowledgement (0.1 to 3,600 s).")] = 30.0,
    as_json: JsonOption = False,
) -> None:
    """Produce a JSON-lines file of event values to a Kafka topic, one message per non-blank line
    (blank lines are counted, not produced; the line's bytes as the value, untouched: a line that
    is not JSON arrives as poison),
    stamped now by the producer, or by the value's --timestamp-field. Reads CONSOLIDATOR_KAFKA_BOOTSTRAP,
    CONSOLIDATOR_SOURCE_TOPIC, CONSOLIDATOR_GROUP_KEY_FIELD and CONSOLIDATOR_EVENT_TIME_FIELD when the
    options are not given. Exit 1 unless every message was acknowledged (acks=all). While tracing is
    on (OTEL_TRACES_EXPORTER) the run is one span and every message carries its `traceparent` header."""
    from confluent_kafka import KafkaException, Producer

    from consolidator.rules.shape_spec import parse_path
    from consolidator.support.kafkalog import client_logging

    try:
        stamp_path = None if not timestamp_field else parse_path(timestamp_field)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--timestamp-field") from None
    try:
        handle = file.open("rb")
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {file}: {exc}", param_hint="FILE") from None
    producer = Producer({**client_logging(), "bootstrap.servers": bootstrap_servers, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": int(timeout_seconds * 1000)})
    errors: list[str] = []
    partitions: dict[int, int] = {}
    sent = blank = 0
    unstamped: list[str] = []  # lines produced stamped now: their time could not be read
    tracing.configure("consolidator-producer")
    span = tracing.start_send_span(topic, "produce")  # None while tracing is off
    headers = None if span is None else [("traceparent", tracing.traceparent_of(span).encode())]

    def delivered(error, message) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            partitions[message.partition()] = partitions.get(message.partition(), 0) + 1

    with handle:
        for line in handle:
            line = line.strip()
            if not line:
                blank += 1  # no message, but counted: every line of the file is accounted for
                continue
            stamp = {}  # no timestamp: the producer stamps it now
            if stamp_path is not None:
                try:
                    stamp = {"timestamp": max(1, _stamp(line, stamp_path))}  # librdkafka reads 0 as now
                except ValueError as exc:
                    unstamped.append(f"line {sent + blank + 1}: {exc}")
            try:
                try:
                    producer.produce(topic, value=line, key=_key(line, key_field), headers=headers, **stamp,
                                     on_delivery=delivered)
                except BufferError:
                    producer.poll(1.0)  # queue full: serve delivery reports, then once more
                    producer.produce(topic, value=line, key=_key(line, key_field), headers=headers, **stamp,
                                     on_delivery=delivered)
            except (BufferError, KafkaException) as exc:
                errors.append(str(exc))
                break
            sent += 1
            producer.poll(0)
    # the delivery reports of messages that timed out arrive after message.timeout.ms: wait past it
    unconfirmed = producer.flush(timeout_seconds + 5)
    if unconfirmed:
        errors.append(f"{unconfirmed} message(s) without a delivery report after {timeout_seconds + 5:g} s")
    acknowledged = sum(partitions.values())
    if span is not None:
        span.set_attributes({"messaging.batch.message_count": sent, "consolidator.produce.acknowledged": acknowledged})
        span.end()
        tracing.flush()
    document = {"file": str(file), "topic": topic, "bootstrap_servers": bootstrap_servers, "produced": sent,
                "blank_lines": blank, "stamped_now": len(unstamped), "unstamped": unstamped[:10],
                "acknowledged": acknowledged, "per_partition": dict(sorted(partitions.items())),
                "errors": errors[:10], "ok": not errors and not unconfirmed and acknowledged == sent}
    if as_json:
        emit_json(document)
    else:
        spread = ", ".join(f"{p}: {n}" for p, n in sorted(partitions.items())) or "none"
        out.print(f"{acknowledged} of {sent} messages from {file} acknowledged by {topic} at {bootstrap_servers} "
                  f"(per partition {spread})" + (f"; {blank} blank lines, not produced" if blank else ""),
                  soft_wrap=True)
        if unstamped:
            say_error("stamped now", f"{len(unstamped)} line(s) without a readable --timestamp-field, "
                                    f"first {unstamped[0]}")
        for error in errors[:10]:
            say_error("not delivered", error)
    if not document["ok"]:
        raise typer.Exit(EXIT_FAILED)
