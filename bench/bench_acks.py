"""Ack benchmark: member acks through the ack service into MariaDB.

Default: 100,000 acks = 95,000 distinct members (190 sealed batches of 500) + 5,000 duplicates,
in random order, applied in chunks of ``--chunk`` acks per service call (one SQS poll of the
acks function: 1,000, the deployed batch size, infra config ``completion.batch_size``), one
member per ack, named by index. Every batch completes: 190 completion messages go to a file sink.
Baseline measured in the same run on the same acks: a bare multi-row INSERT of the acks
into an append-only log table (no idempotence, no completion), one transaction per chunk.
The same pair again in chunks of 100 (``--small-chunk``), where a call touches ~80 trackers
for 100 acks: it shows what the per-tracker work costs when polls are small.
Prints figures, then one JSON line with acks_per_s and ratio_vs_insert_floor (at ``--chunk``).
Not part of the test suite: `make bench-acks` (`--quick` for a 10x smaller run).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from consolidator.rules.clock import ManualClock
from consolidator.rules.completion import Ack
from consolidator.services.acks import AckService
from consolidator.sinks.file import FileSink
from consolidator.store.completion import SealedBatch
from consolidator.store.databases import drop_owned_database, recreate_owned_database
from consolidator.store.mysql import ConnectionParams, MySQLStore

T0 = 1_795_000_000_000
BENCH_CREATOR = "consolidator bench"  # the ownership marker of the bench's databases
TARGET = 0.5


def make_acks(batches: int, members: int, duplicates: int, seed: int = 12) -> tuple[list[SealedBatch], list[Ack]]:
    sealed = [SealedBatch(f"{b:032x}", f"WH-{b:04d}", tuple(f"O{b:04d}-{i:04d}" for i in range(members)))
              for b in range(batches)]
    acks = [Ack(s.batch_id, members=(i,)) for s in sealed for i in range(members)]
    rng = random.Random(seed)
    acks += rng.sample(acks, duplicates)
    rng.shuffle(acks)
    return sealed, acks


def reset(store: MySQLStore, sealed: list[SealedBatch]) -> None:
    """Fresh trackers and an empty log (set-up, not timed)."""
    with store.transaction() as cur:
        cur.execute("DELETE FROM completion_trackers")
        cur.execute("DELETE FROM completion_items")
        cur.execute("TRUNCATE TABLE ack_floor")
    for start in range(0, len(sealed), 50):
        store.seal(sealed[start:start + 50], T0)


def insert_floor(store: MySQLStore, acks: list[Ack], chunk: int) -> float:
    started = time.perf_counter()
    for start in range(0, len(acks), chunk):
        part = acks[start:start + chunk]
        with store.transaction() as cur:
            cur.execute(
                "INSERT INTO ack_floor (batch_id, member_index, acked_at_ms) VALUES "
                + ", ".join(["(%s, %s, %s)"] * len(part)),
                tuple(v for a in part for v in (a.batch_id, a.members[0], T0)),
            )
    return time.perf_counter() - started


def through_service(store: MySQLStore, acks: list[Ack], chunk: int, out: Path) -> tuple[float, int]:
    service = AckService(store, FileSink(out), ManualClock(T0 + 1000))
    started = time.perf_counter()
    applied = 0
    for start in range(0, len(acks), chunk):
        applied += sum(r.newly_acked for r in service.ack(acks[start:start + chunk]))
    return time.perf_counter() - started, applied


def check_outcome(store: MySQLStore, out: Path, applied: int, distinct: int, batches: int) -> None:
    """Every distinct member applied once, every batch complete with one completion published."""
    completions = sum(1 for _ in out.open())
    with store.transaction() as cur:
        cur.execute("SELECT COUNT(*) AS n FROM completion_trackers WHERE outbox = 'PUBLISHED'"
                    " AND acked_count = member_count")
        complete = cur.fetchone()["n"]
    if (applied, completions, complete) != (distinct, batches, batches):
        raise SystemExit(f"wrong outcome: {applied} applied of {distinct}, {completions} "
                         f"completions and {complete} complete trackers of {batches}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=190)
    parser.add_argument("--members", type=int, default=500, help="members per batch")
    parser.add_argument("--duplicates", type=int, default=5_000)
    parser.add_argument("--chunk", type=int, default=1000, help="acks per service call / per floor INSERT")
    parser.add_argument("--small-chunk", type=int, default=100, help="the second, small-poll measurement (0: off)")
    parser.add_argument("--quick", action="store_true", help="10x smaller")
    parser.add_argument("--repeat", type=int, default=2, help="runs per variant; the best counts")
    parser.add_argument("--database-url", default=os.environ.get(
        "BENCH_DATABASE_URL", "mysql://root:@127.0.0.1:3306/consolidator_bench_acks"))
    args = parser.parse_args()
    if args.quick:
        args.batches, args.duplicates = args.batches // 10, args.duplicates // 10

    params = ConnectionParams.from_url(args.database_url)
    recreate_owned_database(params, BENCH_CREATOR, T0)  # refuses a database the bench did not create
    store = MySQLStore(params)
    store.migrate(T0)
    with store.transaction() as cur:
        cur.execute("CREATE TABLE ack_floor (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
                    " batch_id CHAR(32) CHARACTER SET ascii NOT NULL, member_index INT UNSIGNED NOT NULL,"
                    " acked_at_ms BIGINT NOT NULL) ENGINE=InnoDB")
    sealed, acks = make_acks(args.batches, args.members, args.duplicates)
    distinct = args.batches * args.members

    best: dict[tuple[str, int], float] = {}
    chunks = [args.chunk] + ([args.small_chunk] if args.small_chunk and args.small_chunk != args.chunk else [])
    with tempfile.TemporaryDirectory() as tmp_name:
        for run in range(args.repeat):
            for chunk in chunks:
                for name in ("insert_floor", "ack_service"):
                    reset(store, sealed)
                    if name == "insert_floor":
                        seconds = insert_floor(store, acks, chunk)
                    else:
                        out = Path(tmp_name) / f"completions-{run}-{chunk}.jsonl"
                        seconds, applied = through_service(store, acks, chunk, out)
                        check_outcome(store, out, applied, distinct, args.batches)
                    print(f"{name:>12} run {run + 1}, {chunk:>5} a call: {len(acks)} acks in {seconds:6.2f} s"
                          f" = {len(acks) / seconds:>8.0f} acks/s", file=sys.stderr)
                    best[name, chunk] = min(seconds, best.get((name, chunk), seconds))
    store.close()
    drop_owned_database(params, BENCH_CREATOR)
    rate = {key: len(acks) / seconds for key, seconds in best.items()}
    figures = {
        "acks": len(acks), "distinct_members": distinct, "duplicates": args.duplicates,
        "batches": args.batches, "members_per_batch": args.members, "chunk": args.chunk,
        "insert_floor_acks_per_s": round(rate["insert_floor", args.chunk]),
        "acks_per_s": round(rate["ack_service", args.chunk]),
        "ratio_vs_insert_floor": round(rate["ack_service", args.chunk] / rate["insert_floor", args.chunk], 3),
        "target_ratio_vs_insert_floor": TARGET,
    }
    if len(chunks) > 1:
        small = chunks[1]
        figures |= {"small_chunk": small, "small_chunk_acks_per_s": round(rate["ack_service", small]),
                    "small_chunk_insert_floor_acks_per_s": round(rate["insert_floor", small]),
                    "small_chunk_ratio_vs_insert_floor": round(
                        rate["ack_service", small] / rate["insert_floor", small], 3)}
    figures["meets_target"] = figures["ratio_vs_insert_floor"] >= TARGET
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
