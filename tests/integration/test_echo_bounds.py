"""Every value a message echoes is bounded (consolidator.rules.printable.echoed): a refused ack with a
250 KB batch id, item id or field name is logged in a line of a few hundred characters, through
the real acks handler; a poison event's reason quotes a bounded piece of a huge field."""

from __future__ import annotations

import json
import logging

from support import T0, record
from test_acks_handler import BATCH, lambda_event, load_handler, sealed_message, sqs  # noqa: F401 (fixture)

from consolidator.demo.lambda_context import LocalLambdaContext
from consolidator.rules.events import FieldNames, PoisonEvent, decode

HUGE = 250_000
LINE_BOUND = 2_000  # characters of one log line


def messages(*bodies: dict) -> list[dict]:
    return [{"MessageId": f"m{i}", "ReceiptHandle": f"r{i}", "Body": json.dumps(body), "MD5OfBody": "-"}
            for i, body in enumerate(bodies)]


class Kept(logging.Handler):
    """Every record of a logger, as the JSON line of its message and fields (what a log line holds)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = {k: v for k, v in vars(record).items() if k not in ("args", "exc_info", "msg")}
        self.lines.append(json.dumps({"message": record.getMessage(), **fields}, default=str))


def test_refused_acks_with_huge_values_are_logged_bounded(sqs, store, clock):  # noqa: F811
    sealed = sealed_message(store, clock, "WH-7", BATCH, ("A001",))
    kept = Kept()
    logging.getLogger("consolidator.services.acks").addHandler(kept)  # the handler's own logger
    event = lambda_event(messages(
        {"batch_id": "f" * HUGE, "members": [0]},                                      # not a batch id
        {"batch_id": BATCH, "members": [0], "x" * HUGE: 1},                             # unknown field
        {"batch_id": BATCH, "ack_token": sealed["ack_token"], "item_ids": ["i" * HUGE]},  # unknown item
        {"batch_id": BATCH, "ack_version": "v" * HUGE, "members": [0]},                 # unknown version
    ))
    try:
        response = load_handler().handler(event, LocalLambdaContext(function_name="acks"))
    finally:
        logging.getLogger("consolidator.services.acks").removeHandler(kept)
    assert response["batchItemFailures"] == []  # refused for good, consumed
    lines = [line for line in kept.lines if '"message": "ack refused"' in line]
    assert len(lines) == 4, lines
    assert max(map(len, lines)) < LINE_BOUND, [len(line) for line in lines]
    assert sum(f"({HUGE:,} characters)" in line for line in lines) == 4


def test_a_poison_reason_quotes_a_bounded_piece_of_a_huge_field():
    value = json.dumps({"location_id": "WH-1", "order_id": "A1",
                        "items": [{"sku": "S", "quantity": "q" * HUGE}]}).encode()
    try:
        decode(record(1, value, timestamp_ms=T0), FieldNames(), 1 << 20)
    except PoisonEvent as poison:
        assert len(poison.detail) < 200 and f"({HUGE:,} characters)" in poison.detail, poison.detail[:300]
    else:
        raise AssertionError("a quantity that is a string is poison")
