"""A seeded synthetic topic: order events keyed by warehouse, some repeated items, some poison."""

from __future__ import annotations

import json
import random
import time
import zlib
from dataclasses import dataclass

from consolidator.demo.check import Produced
from consolidator.rules.events import KafkaRecord

TOPIC = "orders"
POISON_VALUES = (b"{not json", b"[1, 2]", b'{"order_id": "X"}', b'{"location_id": "WH-0", "order_id": "X", "items": 5}',
                 b"\xff\xfe", b"")


@dataclass
class Workload:
    records: dict[int, list[KafkaRecord]]  # partition -> records in offset order
    produced: list[Produced]

    @property
    def size(self) -> int:
        return len(self.produced)


def make_workload(seed: int, events: int, partitions: int = 4, groups: int = 24, poison_rate: float = 0.02) -> Workload:
    rng = random.Random(seed)
    records: dict[int, list[KafkaRecord]] = {p: [] for p in range(partitions)}
    produced: list[Produced] = []
    now_ms = int(time.time() * 1000)
    for n in range(events):
        group = f"WH-{rng.randrange(groups)}"
        partition = zlib.crc32(group.encode()) % partitions  # keyed like a Kafka producer would
        offset = len(records[partition])
        poison = rng.random() < poison_rate
        if poison:
            value = rng.choice(POISON_VALUES)
            item = None
        else:
            item = f"O-{rng.randrange(max(1, events // 3))}"  # about a third of items repeat
            value = json.dumps({"location_id": group, "order_id": item,
                                "items": [{"sku": f"SKU-{rng.randrange(9)}", "quantity": rng.randrange(1, 5)}]}).encode()
        timestamp_ms = now_ms + n
        records[partition].append(KafkaRecord(TOPIC, partition, offset, timestamp_ms, group.encode(), value))
        produced.append(Produced((TOPIC, partition, offset), timestamp_ms, None if poison else group, item, poison))
    return Workload(records, produced)
