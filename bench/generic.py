"""The generic event shape of the benchmarks: about 1 KB events, each member carrying
its whole event (``CONSOLIDATOR_MEMBER_PAYLOAD=full``) and four outputs, next to the default
shape's run. Kept small: a benchmark times it over at most ``GENERIC_RECORDS`` records."""

from __future__ import annotations

import json
import random

from consolidator.rules.events import FieldNames, KafkaRecord
from consolidator.rules.shape import Shape, parse_outputs

GENERIC_RECORDS = 20_000
GENERIC_SHAPE = Shape(parse_outputs(json.dumps([
    {"name": "events", "op": "count"},
    {"name": "total", "op": "sum", "path": "order.total"},
    {"name": "pages", "op": "distinct", "path": "context.page"},
    {"name": "latest", "op": "last", "path": "order.status"},
])), full_payload=True)
GENERIC_NAMES = FieldNames(shape=GENERIC_SHAPE)


def generic_record(record: KafkaRecord, rng: random.Random) -> KafkaRecord:
    """``record`` (an order of the reference domain) as an event of about 1 KB with the same
    group key, item id and position."""
    order = json.loads(record.value)
    value = {"location_id": order["location_id"], "order_id": order["order_id"],
             "order": {"total": rng.randrange(1, 100_000) / 100, "status": rng.choice(["new", "paid", "sent"]),
                       "lines": order["items"]},
             "context": {"page": f"/p/{rng.randrange(20)}", "agent": "bench/1.0 " + "x" * 700,
                         "tags": [f"t{rng.randrange(9)}" for _ in range(8)]}}
    return record._replace(value=json.dumps(value).encode())
