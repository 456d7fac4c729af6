"""The demo's invariant check (docs/semantics.md section 9), pure: what was produced vs what came out.

L, nothing lost: every valid event is a member of a published batch, or was coalesced into a
   later event for the same item that is (``event_count`` sums to the number of valid events),
   or sits in a dead batch in the dead letter; every poison message is in the dead letter.
D, no duplicate effect: no event position appears under two different batch ids.
T, bounded latency (when a bound is given): every published batch reached the output within
   the bound of its oldest member's first ingest (``first_event_at``), which bounds every member.
"""

from __future__ import annotations

import bisect
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime

Position = tuple[str, int, int]  # (topic, partition, offset)


@dataclass(frozen=True, slots=True)
class Produced:
    position: Position
    timestamp_ms: int
    group_key: str | None
    item_id: str | None
    poison: bool


@dataclass(frozen=True, slots=True)
class OutBatch:
    """One batch message read back from the output topic (or a dead batch's message)."""

    message: dict
    timestamp_ms: int
    dead: bool = False

    @property
    def batch_id(self) -> str:
        return self.message["batch_id"]

    def positions(self) -> list[Position]:
        return [(m["topic"], int(m["partition"]), int(m["offset"])) for m in self.message.get("members", [])]


@dataclass
class CheckResult:
    problems: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.problems


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _epoch_ms(iso: str) -> int:
    return round(datetime.fromisoformat(iso).timestamp() * 1000)


def check(produced: list[Produced], batches: list[OutBatch], dead_letter: list[dict], max_listed: int = 5,
          latency_bound_s: float | None = None) -> CheckResult:
    result = CheckResult()
    problems = result.problems
    by_position = {p.position: p for p in produced}
    valid = [p for p in produced if not p.poison]
    poison = [p for p in produced if p.poison]

    # Distinct batches (the same id may arrive more than once: at-least-once delivery).
    distinct: dict[str, OutBatch] = {}
    deliveries = Counter()
    for batch in batches:
        deliveries[batch.batch_id] += 1
        first = distinct.setdefault(batch.batch_id, batch)
        if first.message.get("members") != batch.message.get("members"):
            problems.append(f"batch {batch.batch_id} was published twice with different members")
    dead_batches = [OutBatch(e["batch"], 0, dead=True) for e in dead_letter if e.get("kind") == "dead_batch"]
    for batch in dead_batches:
        distinct.setdefault(batch.batch_id, batch)

    # D: one batch id per event position; members are real valid events of the batch's group.
    owner: dict[Position, str] = {}
    members: dict[tuple[str, str], list[tuple[Position, str]]] = defaultdict(list)
    for batch in distinct.values():
        for position in batch.positions():
            previous = owner.setdefault(position, batch.batch_id)
            if previous != batch.batch_id:
                problems.append(f"event {position} is under two batch ids: {previous} and {batch.batch_id}")
            event = by_position.get(position)
            if event is None or event.poison:
                problems.append(f"batch {batch.batch_id} holds {position}, which is not a valid produced event")
                continue
            if event.group_key != batch.message.get("group_key"):
                problems.append(f"batch {batch.batch_id} of {batch.message.get('group_key')} holds an event of {event.group_key}")
            members[(event.group_key, event.item_id)].append((position, batch.batch_id))
    for pairs in members.values():
        pairs.sort()

    # L: each valid event is a member, or superseded by a later member for the same item.
    latencies: list[float] = []
    lost: list[Position] = []
    for event in valid:
        pairs = members.get((event.group_key, event.item_id), [])
        index = bisect.bisect_left(pairs, (event.position, ""))
        covering = next((pairs[i] for i in range(index, len(pairs)) if pairs[i][0][:2] == event.position[:2]), None)
        if covering is None:
            lost.append(event.position)
            continue
        batch = distinct[covering[1]]
        if not batch.dead:
            latencies.append((batch.timestamp_ms - event.timestamp_ms) / 1000)
    if lost:
        problems.append(f"{len(lost)} valid events are in no batch and not in the dead letter, e.g. {lost[:max_listed]}")
    counted = sum(int(b.message.get("event_count", 0)) for b in distinct.values())
    if counted != len(valid):
        problems.append(f"batches account for {counted} events (event_count), {len(valid)} valid events were produced")

    # Poison: every poison message is in the dead letter with a reason.
    lettered = {
        (e["source"]["topic"], int(e["source"]["partition"]), int(e["source"]["offset"]))
        for e in dead_letter if e.get("kind") == "poison" and e.get("reason")
    }
    missing = [p.position for p in poison if p.position not in lettered]
    if missing:
        problems.append(f"{len(missing)} poison messages are not in the dead letter: {missing[:max_listed]}")
    strays = lettered - {p.position for p in poison}
    if strays:
        problems.append(f"{len(strays)} valid events were dead-lettered as poison: {sorted(strays)[:max_listed]}")

    published = [b for b in distinct.values() if not b.dead]
    # T: output timestamp - first ingest of the batch's oldest member.
    ingest_to_output = {b.batch_id: (b.timestamp_ms - _epoch_ms(b.message["first_event_at"])) / 1000
                        for b in published if "first_event_at" in b.message}
    late = sorted((s, i) for i, s in ingest_to_output.items() if latency_bound_s is not None and s > latency_bound_s)
    if late:
        problems.append(f"T: {len(late)} batches reached the output more than {latency_bound_s}s after their first "
                        f"ingest, e.g. {[(i, round(s, 3)) for s, i in late[-max_listed:]]}")
    sizes = [len(b.positions()) for b in published]
    result.stats = {
        "messages_in": len(produced),
        "valid_events": len(valid),
        "distinct_items": len({(p.group_key, p.item_id) for p in valid}),
        "groups": len({p.group_key for p in valid}),
        "poison_messages": len(poison),
        "batches_out": len(published),
        "batch_deliveries": sum(deliveries.values()),
        "duplicate_deliveries": sum(n - 1 for n in deliveries.values()),
        "dead_batches": len(dead_batches),
        "dead_lettered": len(lettered) + len(dead_batches),
        "compaction_ratio": round(len(valid) / len(published), 2) if published else 0.0,
        "batch_size_min": min(sizes, default=0),
        "batch_size_median": statistics.median(sizes) if sizes else 0,
        "batch_size_max": max(sizes, default=0),
        "flush_reasons": dict(Counter(b.message.get("flush_reason") for b in published)),
        "latency_s_p50": round(_percentile(latencies, 0.5), 3),
        "latency_s_p95": round(_percentile(latencies, 0.95), 3),
        "latency_s_max": round(max(latencies, default=0.0), 3),
        "first_ingest_to_output_s_max": round(max(ingest_to_output.values(), default=0.0), 3),
    }
    return result
