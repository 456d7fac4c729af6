"""Exact checkers over what a chaos run left behind, and the corruptions that prove they bite.

Each checker is a pure function of a :class:`Snapshot` and returns its violations (empty =
holds). :func:`self_test` corrupts a clean snapshot once per checker and fails unless that
checker, and only a checker, reports it.
"""

from __future__ import annotations

import copy
import json
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from consolidator.demo.check import OutBatch, Produced, check

Position = tuple[str, int, int]


@dataclass
class Snapshot:
    produced: list[Produced]
    acknowledged: set[Position]  # committed by the event-source emulator
    output_raw: bytes  # the file sink's bytes, as written
    dead_letter_raw: bytes  # the file dead letter's bytes, as written
    rows: list[dict] = field(default_factory=list)  # buffer rows: position, group, item, effective state (status), batch id
    batches: list[dict] = field(default_factory=list)  # batches: batch_id, group_key, state, last_error, claimed_at_ms
    rate_limit: tuple[int, int] | None = None  # (batches, period ms) every group was limited to
    completions_raw: bytes | None = None  # the completion sink's bytes, when tracking was on


def _lines(raw: bytes) -> list[bytes]:
    """Complete lines, as every reader sees them: an unterminated tail (a writer killed in the
    middle of an append, never confirmed) is not an entry."""
    return [line for line in raw.split(b"\n")[:-1] if line]


def _parsed(raw: bytes) -> list[dict]:
    out = []
    for line in _lines(raw):
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # reported by the torn-line checker
    return out


def _position(row: dict) -> Position:
    return (row["src_topic"], int(row["src_partition"]), int(row["src_offset"]))


def _demo_check(s: Snapshot):
    batches = [OutBatch(m, 0) for m in _parsed(s.output_raw)]
    return check(s.produced, batches, _parsed(s.dead_letter_raw), max_listed=3).problems


def lost(s: Snapshot) -> list[str]:
    """L: every valid event is in a published batch (or coalesced into a later one that is), or
    dead-lettered; every poison record is dead-lettered with a reason."""
    return [p for p in _demo_check(s) if "under two batch ids" not in p]


def duplicated(s: Snapshot) -> list[str]:
    """D: no event position under two batch ids (in the output, the dead letter or the buffer)."""
    found = [p for p in _demo_check(s) if "under two batch ids" in p]
    ids: dict[Position, set[str]] = defaultdict(set)
    for row in s.rows:
        if row["batch_id"]:
            ids[_position(row)].add(row["batch_id"])
    found += [f"buffer: {pos} carries batch ids {sorted(v)}" for pos, v in ids.items() if len(v) > 1][:3]
    return found


def split(s: Snapshot) -> list[str]:
    """B: every claim under one id: a published batch's members are exactly the buffer rows
    that carry its id."""
    rows_by_id: dict[str, set[Position]] = defaultdict(set)
    for row in s.rows:
        if row["batch_id"]:
            rows_by_id[row["batch_id"]].add(_position(row))
    found = []
    for message in _parsed(s.output_raw):
        members = {(m["topic"], int(m["partition"]), int(m["offset"])) for m in message.get("members", [])}
        if members != rows_by_id.get(message["batch_id"], set()):
            found.append(f"batch {message['batch_id']}: {len(members)} members published, "
                         f"{len(rows_by_id.get(message['batch_id'], ()))} rows carry its id")
    return sorted(set(found))[:3]


def stuck(s: Snapshot) -> list[str]:
    """S: after recovery nothing is left CLAIMED (rows or batches)."""
    rows = sum(1 for r in s.rows if r["status"] == "CLAIMED")
    batches = [b["batch_id"] for b in s.batches if b["state"] == "CLAIMED"]
    return ([f"{rows} rows still CLAIMED"] if rows else []) + ([f"batches still CLAIMED: {batches[:3]}"] if batches else [])


def stored_twice(s: Snapshot) -> list[str]:
    """S1: no source position is stored in two rows."""
    counts = Counter(_position(r) for r in s.rows)
    return [f"{pos} stored {n} times" for pos, n in counts.items() if n > 1][:3]


def same_id_other_bytes(s: Snapshot) -> list[str]:
    """A batch id always stands for the same bytes, however often it is published."""
    seen: dict[str, bytes] = {}
    found = []
    for line in _lines(s.output_raw):
        try:
            batch_id = json.loads(line)["batch_id"]
        except (ValueError, KeyError, TypeError):
            continue
        if seen.setdefault(batch_id, line) != line:
            found.append(f"batch {batch_id} was published with different bytes")
    return found[:3]


def torn(s: Snapshot) -> list[str]:
    """No reader ever sees a torn entry: every complete line of every file output is one JSON
    document (a torn write is cut off before the next append, never glued onto)."""
    found = []
    for name, raw in (("output", s.output_raw), ("dead letter", s.dead_letter_raw),
                      ("completions", s.completions_raw or b"")):
        for line in _lines(raw):
            try:
                json.loads(line)
            except ValueError:
                found.append(f"{name} holds a torn line: {line[:60]!r}")
    return found[:3]


def not_durable(s: Snapshot) -> list[str]:
    """Every acknowledged record is durable: a valid one as a buffer row of its item at or past
    its offset in its partition (coalescing keeps the newest), a poison one in the dead letter."""
    newest: dict[tuple, int] = {}
    for row in s.rows:
        key = (row["group_key"], row["item_id"], row["src_topic"], int(row["src_partition"]))
        newest[key] = max(newest.get(key, -1), int(row["src_offset"]))
    lettered = {(e["source"]["topic"], int(e["source"]["partition"]), int(e["source"]["offset"]))
                for e in _parsed(s.dead_letter_raw) if e.get("kind") == "poison"}
    missing = []
    for event in s.produced:
        if event.position not in s.acknowledged:
            continue
        if event.poison:
            if event.position not in lettered:
                missing.append(event.position)
        elif newest.get((event.group_key, event.item_id, *event.position[:2]), -1) < event.position[2]:
            missing.append(event.position)
    return [f"{len(missing)} acknowledged records are not durable, e.g. {sorted(missing)[:3]}"] if missing else []


def dead_without_failure(s: Snapshot) -> list[str]:
    """A batch goes DEAD only after failed publishes: its dead-letter entry names the failure."""
    found = [f"batch {e['batch']['batch_id']} went DEAD with no failed publish ({e.get('detail')!r})"
             for e in _parsed(s.dead_letter_raw)
             if e.get("kind") == "dead_batch" and e.get("detail") in (None, "", "max attempts reached")]
    found += [f"batch {b['batch_id']} is DEAD with no recorded error" for b in s.batches
              if b["state"] == "DEAD" and not b.get("last_error")]
    return found[:3]


def over_rate(s: Snapshot) -> list[str]:
    """Rate limit: no group has more than N batch claims in any window of P (claim times)."""
    if s.rate_limit is None:
        return []
    limit, period_ms = s.rate_limit
    times: dict[str, list[int]] = defaultdict(list)
    for b in s.batches:
        if b.get("kind", "batch") == "batch":
            times[b["group_key"]].append(int(b["claimed_at_ms"]))
    found = []
    for group, claims in times.items():
        claims.sort()
        for i in range(limit, len(claims)):
            if claims[i] - claims[i - limit] < period_ms:
                found.append(f"group {group}: {limit + 1} claims within {claims[i] - claims[i - limit]} ms "
                             f"(limit {limit} per {period_ms} ms)")
                break
    return found[:3]


def completion_wrong(s: Snapshot) -> list[str]:
    """Completion tracking: every published tracked batch has its completion message (each copy
    the same bytes, the same member count as the batch), and no other batch has one."""
    if s.completions_raw is None:
        return []
    published = {m["batch_id"]: m for m in _parsed(s.output_raw) if m.get("completion_tracking")}
    copies: dict[str, set[bytes]] = defaultdict(set)
    for line in _lines(s.completions_raw):
        try:
            copies[json.loads(line)["batch_id"]].add(line)
        except (ValueError, KeyError, TypeError):
            continue  # reported by the torn-line checker
    found = [f"batch {b} is complete but has no completion message" for b in published if b not in copies]
    found += [f"completion for {b}, which was never published as a tracked batch" for b in copies if b not in published]
    for batch, lines in copies.items():
        if len(lines) > 1:
            found.append(f"batch {batch} has completion messages with different bytes")
        elif batch in published and json.loads(next(iter(lines)))["member_count"] != len(published[batch]["members"]):
            found.append(f"batch {batch}: the completion's member count is not the batch's")
    return found[:3]


CHECKERS: dict[str, Callable[[Snapshot], list[str]]] = {
    "lost": lost, "duplicated": duplicated, "split": split, "stuck": stuck, "stored_twice": stored_twice,
    "same_id_other_bytes": same_id_other_bytes, "torn": torn, "not_durable": not_durable,
    "dead_without_failure": dead_without_failure, "over_rate": over_rate, "completion_wrong": completion_wrong,
}


def run_checks(s: Snapshot) -> dict[str, list[str]]:
    return {name: checker(s) for name, checker in CHECKERS.items()}


# -- self-test: one corruption per checker --------------------------------------------------------


def _first_published(s: Snapshot) -> dict:
    return json.loads(_lines(s.output_raw)[0])


def _drop_batch(s: Snapshot) -> None:
    """Every copy of one published batch disappears: one the dead letter does not hold, or (when
    every batch went DEAD before it was redriven) one and its dead-letter entry."""
    def batch_id(entry: dict) -> str | None:
        return entry["batch"]["batch_id"] if entry.get("kind") == "dead_batch" else None

    dead = {batch_id(e) for e in _parsed(s.dead_letter_raw)}
    published = [m["batch_id"] for m in _parsed(s.output_raw)]
    victim = next((b for b in published if b not in dead), published[0])
    s.output_raw = b"".join(line + b"\n" for line in _lines(s.output_raw) if json.loads(line)["batch_id"] != victim)
    s.dead_letter_raw = b"".join(line + b"\n" for line in _lines(s.dead_letter_raw)
                                 if batch_id(json.loads(line)) != victim)


def _steal_member(s: Snapshot) -> None:
    """Publish one event of batch A again under a made-up batch id B."""
    message = _first_published(s)
    thief = dict(message, batch_id="f" * 32, members=message["members"][:1], event_count=0)
    s.output_raw += json.dumps(thief).encode() + b"\n"


def _reassign_row(s: Snapshot) -> None:
    row = next(r for r in s.rows if r["batch_id"])
    row["batch_id"] = "e" * 32


def _leave_claimed(s: Snapshot) -> None:
    next(r for r in s.rows if r["status"] == "SENT")["status"] = "CLAIMED"


def _store_twice(s: Snapshot) -> None:
    s.rows.append(dict(s.rows[0], batch_id=""))


def _other_bytes(s: Snapshot) -> None:
    message = _first_published(s)
    s.output_raw += json.dumps(dict(message, flushed_at="1970-01-01T00:00:00.000Z")).encode() + b"\n"


def _tear(s: Snapshot) -> None:
    """A killed writer's partial line with the next confirmed batch appended onto it."""
    line = _lines(s.output_raw)[0]
    s.output_raw += line[:25] + line + b"\n"


def _forget_row(s: Snapshot) -> None:
    acknowledged = next(p for p in s.produced if not p.poison and p.position in s.acknowledged)
    s.rows = [r for r in s.rows if (r["group_key"], r["item_id"]) != (acknowledged.group_key, acknowledged.item_id)]


def _dead_for_nothing(s: Snapshot) -> None:
    entry = {"kind": "dead_batch", "reason": "max_attempts", "detail": "max attempts reached", "attempts": 5,
             "batch": _first_published(s)}
    s.dead_letter_raw += json.dumps(entry).encode() + b"\n"


def _limit_tighter(s: Snapshot) -> None:
    """A second claim of a group within a period that allows one."""
    s.rate_limit = (1, 10**12)
    s.batches.append(dict(s.batches[0], batch_id="c" * 32))


def _complete_without_message(s: Snapshot) -> None:
    """A tracked batch published, and no completion message anywhere."""
    message = dict(_first_published(s), completion_tracking=True, batch_id="d" * 32)
    s.output_raw += json.dumps(message).encode() + b"\n"
    s.completions_raw = s.completions_raw or b""


CORRUPTIONS: dict[str, Callable[[Snapshot], None]] = {
    "lost": _drop_batch, "duplicated": _steal_member, "split": _reassign_row, "stuck": _leave_claimed,
    "stored_twice": _store_twice, "same_id_other_bytes": _other_bytes, "torn": _tear,
    "not_durable": _forget_row, "dead_without_failure": _dead_for_nothing, "over_rate": _limit_tighter,
    "completion_wrong": _complete_without_message,
}


def self_test(clean: Snapshot) -> dict[str, bool]:
    """For each checker: does it flag its corruption of a clean snapshot? (True = it bites.)"""
    if any(run_checks(clean).values()):
        raise ValueError("the self-test needs a clean snapshot")
    return {name: bool(CHECKERS[name](corrupt(clean, name))) for name in CORRUPTIONS}


def corrupt(clean: Snapshot, name: str) -> Snapshot:
    broken = copy.deepcopy(clean)
    CORRUPTIONS[name](broken)
    return broken
