"""A stand-in for Lambda's MSK event source mapping, as far as offsets are concerned.

Each invocation takes up to ``batch_size`` records from the committed offset of each partition.
When the handler answers, each partition is committed up to its lowest reported failure (or
past the whole batch); when it does not answer (killed, timed out), nothing is committed and the
same records come again. Records committed are *acknowledged*: they must be durable.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from consolidator.rules.events import KafkaRecord
from consolidator.sources.msk import event_from_records

Position = tuple[str, int, int]


class EventSourceEmulator:
    def __init__(self, records: dict[int, list[KafkaRecord]], invoke: Callable[[dict], dict | None],
                 rng: random.Random, batch_size: int = 150) -> None:
        self.records = records
        self.invoke = invoke
        self.rng = rng
        self.batch_size = batch_size
        self.committed = dict.fromkeys(records, 0)
        self.acknowledged: set[Position] = set()
        self.invocations = 0
        self.lost_responses = 0
        self.partial_failures = 0

    def caught_up(self) -> bool:
        return all(self.committed[p] >= len(rs) for p, rs in self.records.items())

    def step(self) -> None:
        """One invocation over some partitions that still have records."""
        open_partitions = [p for p, rs in self.records.items() if self.committed[p] < len(rs)]
        if not open_partitions:
            return
        chosen = self.rng.sample(open_partitions, self.rng.randint(1, len(open_partitions)))
        per_partition = max(1, self.batch_size // len(chosen))
        batch = {p: self.records[p][self.committed[p]: self.committed[p] + self.rng.randint(1, per_partition)]
                 for p in chosen}
        self.invocations += 1
        answer = self.invoke(event_from_records(r for rs in batch.values() for r in rs))
        if answer is None:
            self.lost_responses += 1
            return
        lowest: dict[int, int] = {}
        for failure in answer.get("batchItemFailures", []):
            ident = failure["itemIdentifier"]
            partition = int(str(ident["partition"]).rsplit("-", 1)[1])
            lowest[partition] = min(lowest.get(partition, 1 << 62), int(ident["offset"]))
        if lowest:
            self.partial_failures += 1
        for partition, records in batch.items():
            end = lowest.get(partition, records[-1].offset + 1)
            for record in records:
                if record.offset < end:
                    self.acknowledged.add(record.position)
            self.committed[partition] = max(self.committed[partition], end)
