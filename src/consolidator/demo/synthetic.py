"""The demo's noisy synthetic topic: orders short on stock, in bursts, with repeats and poison."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Message:
    key: bytes | None
    value: bytes
    group_key: str | None  # None for poison messages
    item_id: str | None
    poison: bool = False


POISON_VALUES = (
    b"this is not json",
    b"\xff\xfe not utf-8",
    b'["an", "array", "not", "an", "object"]',
    json.dumps({"order_id": "ORD-LOST", "items": []}).encode(),  # no location_id
    json.dumps({"location_id": "WH-01", "order_id": "ORD-NEG", "items": [{"sku": "SKU-1", "quantity": -3}]}).encode(),
)


def order(location: str, order_id: str, rng: random.Random, skus: int = 40) -> bytes:
    items = [{"sku": f"SKU-{rng.randrange(skus):03d}", "quantity": rng.randint(1, 5)}
             for _ in range(rng.randint(1, 3))]
    return json.dumps({"location_id": location, "order_id": order_id, "items": items}).encode()


def bursts(warehouses: int, orders: int, poison: int, n_bursts: int, seed: int,
           repeat_share: float = 0.25) -> list[list[Message]]:
    """``n_bursts`` bursts of messages. Warehouses are skewed (a few hot ones); about
    ``repeat_share`` of the orders are updated once or twice later (same burst or a later
    one); ``poison`` poison messages are mixed in, the first one in the first burst."""
    rng = random.Random(seed)
    names = [f"WH-{i:02d}" for i in range(1, warehouses + 1)]
    weights = [1 / (rank ** 0.9) for rank in range(1, warehouses + 1)]
    out: list[list[Message]] = [[] for _ in range(n_bursts)]
    for n in range(orders):
        location = rng.choices(names, weights)[0]
        order_id = f"ORD-{n:06d}"
        burst = min(n_bursts - 1, n * n_bursts // orders)
        out[burst].append(Message(location.encode(), order(location, order_id, rng), location, order_id))
        if rng.random() < repeat_share:
            for _ in range(rng.randint(1, 2)):
                later = min(n_bursts - 1, burst + rng.choice((0, 0, 1, 2)))
                out[later].append(Message(location.encode(), order(location, order_id, rng), location, order_id))
    for index in range(poison):
        value = POISON_VALUES[index % len(POISON_VALUES)]
        burst = 0 if index == 0 else rng.randrange(n_bursts)
        target = out[burst]
        target.insert(rng.randrange(len(target) + 1), Message(b"poison", value, None, None, poison=True))
    return out
