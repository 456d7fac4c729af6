"""Rate limit and event TTL on the Lambda path: real MariaDB, manual clock, real file sinks.

Checks docs/semantics.md section 7: at most N batches per group in any window of the period, oldest
rows first, other groups never held back; rows over the TTL go to the dead-letter destination
with reason ``expired`` and only then become EXPIRED; L, D, B and S hold throughout.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from pathlib import Path

import jsonschema
from support import ROWS, STATE, T0, record, sql
from test_flush import RecordingSink, ingest

from consolidator.rules.batch import load_schema
from consolidator.rules.policy import Policy, RateLimit
from consolidator.services.flush import FlushService
from consolidator.sinks.deadletter import FileDeadLetter
from consolidator.store.mysql import MySQLStore

MINUTE = 60_000
V1 = jsonschema.Draft202012Validator(load_schema("1"), format_checker=jsonschema.FormatChecker())
V1_1 = jsonschema.Draft202012Validator(load_schema("1.1"), format_checker=jsonschema.FormatChecker())


class SwitchableDeadLetter(FileDeadLetter):
    """The real file dead-letter destination, which can be switched off (nothing confirmed)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.down = False

    def send(self, entries: Sequence[dict]) -> set[int]:
        if self.down:
            return set(range(len(entries)))
        return super().send(entries)


def service_for(store, sink, dead_letter, clock, policy: Policy, **kwargs) -> FlushService:
    return FlushService(store=store, sink=sink, dead_letter=dead_letter, policy=policy, clock=clock,
                        max_rows_per_tick=1_000_000, **kwargs)


def claim_times(store: MySQLStore, group_key: str) -> list[int]:
    rows = sql(store, "SELECT claimed_at_ms FROM batches WHERE group_key = %s AND kind = 'batch'"
                      " ORDER BY claimed_at_ms", (group_key,))
    return [r["claimed_at_ms"] for r in rows]


def assert_rate(times: list[int], limit: RateLimit) -> None:
    """At most ``batches`` claims in any window of ``period_ms`` (half-open)."""
    for index, t in enumerate(times):
        inside = [u for u in times[: index + 1] if u > t - limit.period_ms]
        assert len(inside) <= limit.batches, f"{len(inside)} claims in the window ending {t}"


def assert_accounted(store: MySQLStore, messages: list[dict], expired: list[dict], ingested: int) -> dict:
    """L, D, B, S with expiry: every stored row is in exactly one published batch (under the
    batch id stored on it) or EXPIRED with exactly one ``expired`` dead-letter entry."""
    by_id: dict[str, dict] = {}
    for message in messages:
        (V1_1 if "held_back_ms" in message else V1).validate(message)
        assert by_id.setdefault(message["batch_id"], message) == message
    owner: dict[tuple, str] = {}
    for batch_id, message in by_id.items():
        for m in message["members"]:
            position = (m["topic"], m["partition"], m["offset"])
            assert owner.setdefault(position, batch_id) == batch_id, f"D: {position} under two ids"
    gone: dict[tuple, dict] = {}
    for entry in expired:
        assert entry["reason"] == "expired" and entry["kind"] == "expired"
        s = entry["source"]
        gone[(s["topic"], s["partition"], s["offset"])] = entry
    rows = sql(store, f"SELECT {STATE} AS status, r.batch_id, src_topic, src_partition, src_offset, merged_events"
                      f" FROM {ROWS}")
    assert [r for r in rows if r["status"] in ("PENDING", "CLAIMED")] == [], "S: rows left"
    for r in rows:
        position = (r["src_topic"], r["src_partition"], r["src_offset"])
        if r["status"] == "EXPIRED":
            assert position in gone and position not in owner
        else:
            assert r["status"] == "SENT" and owner[position] == r["batch_id"]
    assert len(owner) + len(gone) == len(rows), "L: a published or expired position is not a stored row"
    events = sum(m["event_count"] for m in by_id.values()) + sum(e["merged_events"] for e in gone.values())
    assert events == ingested, "L: events lost or doubled"
    return by_id


def test_noisy_group_limited_to_two_batches_a_minute_over_an_hour(store, clock, tmp_path):
    """A group producing ~4 full batches a minute against a limit of 2 a minute, beside a quiet
    group, over a simulated hour with a 20-minute TTL, then drained."""
    limit = RateLimit(2, MINUTE)
    policy = Policy(debounce_ms=MINUTE, hard_window_ms=5 * MINUTE, max_batch_size=5, tick_interval_ms=30_000,
                    ttl_ms=20 * MINUTE)
    store.set_limit("NOISY", limit, clock.now_ms())
    sink = RecordingSink(tmp_path / "out.jsonl")
    dead = FileDeadLetter(tmp_path / "dead.jsonl")
    service = service_for(store, sink, dead, clock, policy)
    offset, ingested, throttled_ticks = 0, 0, 0
    start = clock.now_ms()
    while clock.now_ms() < start + 60 * MINUTE:
        # every 30 s: 10 noisy orders (every 5 s) and, every 5 minutes, one quiet order
        batch = [record(offset + i, location="NOISY", order=f"N{offset + i}", timestamp_ms=clock.now_ms())
                 for i in range(10)]
        if (clock.now_ms() - start) % (5 * MINUTE) == 0:
            batch.append(record(offset + 10, location="QUIET", order=f"Q{offset}", timestamp_ms=clock.now_ms()))
        ingested += ingest(store, clock, batch)
        offset += len(batch)
        clock.advance(30_000)
        report = service.tick()
        assert "QUIET" not in report.throttled
        throttled_ticks += "NOISY" in report.throttled
    for _ in range(200):  # drain: nothing new arrives
        clock.advance(30_000)
        service.tick()
        if not store.pending_group_stats() and not store.batches_in_state("CLAIMED"):
            break

    messages = sink.messages()
    by_id = assert_accounted(store, messages, dead.read(), ingested)
    times = claim_times(store, "NOISY")
    assert_rate(times, limit)
    assert len(times) >= 110 and throttled_ticks > 50  # the limit was the bottleneck all hour
    noisy = sorted((m for m in by_id.values() if m["group_key"] == "NOISY"),
                   key=lambda m: (m["flushed_at"], m["first_event_at"]))
    firsts = [(m["first_event_at"], m["last_event_at"]) for m in noisy]
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(firsts)), "oldest rows first"
    assert any("held_back_ms" in m for m in noisy)
    expired = dead.read()
    assert expired and {e["group_key"] for e in expired} == {"NOISY"}
    assert all(e["age_ms"] > policy.ttl_ms for e in expired)
    quiet = [m for m in by_id.values() if m["group_key"] == "QUIET"]
    assert len(quiet) == 12 and not any("held_back_ms" in m for m in quiet)  # never held back


def test_two_lockless_flushers_never_exceed_the_rate(store, clock, tmp_path, database_url):
    limit = RateLimit(3, MINUTE)
    policy = Policy(debounce_ms=1_000, hard_window_ms=MINUTE, max_batch_size=2, tick_interval_ms=1_000,
                    rate_limit=limit)
    ingested = ingest(store, clock, [record(i, location=f"WH-{i % 2}", order=f"O{i}", timestamp_ms=clock.now_ms())
                                     for i in range(400)])
    stores = [MySQLStore.from_url(database_url) for _ in range(2)]
    sinks = [RecordingSink(tmp_path / f"out-{n}.jsonl") for n in range(2)]
    dead = FileDeadLetter(tmp_path / "dead.jsonl")
    services = [service_for(s, sink, dead, clock, policy, publish_chunk=1)
                for s, sink in zip(stores, sinks, strict=True)]
    lock = threading.Lock()
    errors: list[BaseException] = []
    stop = threading.Event()

    def flusher(n: int) -> None:
        try:
            while not stop.is_set():
                services[n].tick()
                with lock:  # both flushers see time move: every claim races the other's
                    clock.advance(2_500)
        except BaseException as error:  # noqa: BLE001 - re-raised by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=flusher, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    deadline = clock.now_ms() + 30 * MINUTE
    while clock.now_ms() < deadline and store.pending_group_stats() and not errors:
        threading.Event().wait(0.05)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    for group in ("WH-0", "WH-1"):
        times = claim_times(store, group)
        assert len(times) >= 20
        assert_rate(times, limit)
    while store.pending_group_stats() or store.batches_in_state("CLAIMED"):
        clock.advance(MINUTE)
        services[0].tick()
    assert_accounted(store, sinks[0].messages() + sinks[1].messages(), dead.read(), ingested)
    assert sinks[0].messages() and sinks[1].messages(), "both flushers claimed"
    for s in stores:
        s.close()


def test_events_over_the_ttl_are_dead_lettered_and_survive_a_dead_letter_outage(store, clock, tmp_path):
    ttl = 6 * 3_600_000
    policy = Policy(debounce_ms=MINUTE, hard_window_ms=10 * MINUTE, max_batch_size=3, tick_interval_ms=30_000,
                    ttl_ms=ttl)
    now = clock.now_ms()
    old = [record(i, location="WH-1", order=f"OLD{i}", timestamp_ms=now - ttl - 1 - i) for i in range(4)]
    edge = [record(10, location="WH-1", order="EDGE", timestamp_ms=now + MINUTE - ttl)]  # exactly TTL old at the tick
    fresh = [record(20 + i, location="WH-1", order=f"NEW{i}", timestamp_ms=now) for i in range(2)]
    # an item whose newest event is fresh is not expired, even if an older event of it was old
    revived = [record(30, location="WH-1", order="REVIVED", timestamp_ms=now - ttl - 5),
               record(31, location="WH-1", order="REVIVED", timestamp_ms=now)]
    ingested = ingest(store, clock, old + edge + fresh + revived)
    sink = RecordingSink(tmp_path / "out.jsonl")
    dead = SwitchableDeadLetter(tmp_path / "dead.jsonl")
    service = service_for(store, sink, dead, clock, policy)

    dead.down = True
    clock.advance(MINUTE)  # idle: due
    report = service.tick()
    assert report.expired == 0 and dead.read() == []
    assert sorted(sql(store, f"SELECT item_id, {STATE} AS status FROM {ROWS} WHERE item_id LIKE 'OLD%'"),
                  key=lambda r: r["item_id"]) == [{"item_id": f"OLD{i}", "status": "CLAIMED"} for i in range(4)]
    assert store.batch_counts() == {"CLAIMED": 2, "SENT": 2}  # two expiry records, two batches
    published = {i for m in sink.messages() for i in m["item_ids"]}
    assert published == {"EDGE", "NEW0", "NEW1", "REVIVED"}

    clock.advance(30_000)
    report = service.tick()  # still down: retried, still CLAIMED, nothing lost
    assert report.expired == 0 and store.row_counts().get("CLAIMED") == 4
    dead.down = False
    clock.advance(30_000)
    report = service.tick()
    assert report.expired == 4
    entries = dead.read()
    assert sorted(e["item_id"] for e in entries) == [f"OLD{i}" for i in range(4)]
    for e in entries:
        assert e["reason"] == "expired" and e["group_key"] == "WH-1"
        assert e["age_ms"] == now + MINUTE - e["record_ts_ms"] > ttl  # age at the first tick that expired it
        assert e["items"] == [{"sku": "SKU-1", "quantity": 2}] and e["source"]["topic"] == "orders"
    assert store.row_counts() == {"EXPIRED": 4, "SENT": 4}
    assert store.batch_counts() == {"EXPIRED": 2, "SENT": 2}
    assert_accounted(store, sink.messages(), entries, ingested)
    assert service.tick().expired == 0 and len(dead.read()) == 4  # nothing twice


def test_ttl_zero_turns_expiry_off(store, clock, tmp_path):
    policy = Policy(debounce_ms=MINUTE, hard_window_ms=10 * MINUTE, max_batch_size=10, tick_interval_ms=30_000)
    ingested = ingest(store, clock, [record(i, order=f"O{i}", timestamp_ms=T0 - 365 * 86_400_000) for i in range(3)])
    sink = RecordingSink(tmp_path / "out.jsonl")
    dead = FileDeadLetter(tmp_path / "dead.jsonl")
    clock.advance(MINUTE)
    report = service_for(store, sink, dead, clock, policy).tick()
    assert report.expired == 0 and len(report.published) == 1 and dead.read() == []
    assert_accounted(store, sink.messages(), [], ingested)


def test_held_back_batch_says_how_long_and_others_stay_version_1(store, clock, tmp_path):
    policy = Policy(debounce_ms=1_000, hard_window_ms=MINUTE, max_batch_size=2, tick_interval_ms=30_000,
                    rate_limit=RateLimit(1, 10 * MINUTE))
    ingested = ingest(store, clock, [record(i, location="WH-1", order=f"O{i}", timestamp_ms=clock.now_ms())
                                     for i in range(4)])
    sink = RecordingSink(tmp_path / "out.jsonl")
    dead = FileDeadLetter(tmp_path / "dead.jsonl")
    service = service_for(store, sink, dead, clock, policy)
    clock.advance(1_000)
    first = service.tick()
    assert len(first.published) == 1 and first.throttled == {"WH-1": clock.now_ms() + 10 * MINUTE}
    refused_at = clock.now_ms()
    due = service.dry_run()
    assert [(d.stats.group_key, d.throttled_until_ms) for d in due] == [("WH-1", refused_at + 10 * MINUTE)]
    clock.advance(10 * MINUTE - 1)
    assert service.tick().published == []
    clock.advance(1)
    second = service.tick()
    assert len(second.published) == 1 and second.throttled == {}
    messages = sink.messages()
    assert "held_back_ms" not in messages[0] and "schema_minor" not in messages[0]
    V1.validate(messages[0])
    assert messages[1]["held_back_ms"] == 10 * MINUTE and messages[1]["schema_minor"] == 1
    V1_1.validate(messages[1])
    assert not V1.is_valid(messages[1])  # why the field appears only when a group was held back
    assert_accounted(store, messages, [], ingested)


def test_override_wins_over_the_default_and_clear_restores_it(store, clock, tmp_path):
    policy = Policy(debounce_ms=1_000, hard_window_ms=MINUTE, max_batch_size=1, tick_interval_ms=30_000,
                    rate_limit=RateLimit(1, MINUTE))
    ingest(store, clock, [record(i, location=g, order=f"O{i}", timestamp_ms=clock.now_ms())
                          for i, g in enumerate(["A", "A", "A", "B", "B", "B"])])
    store.set_limit("A", RateLimit(3, MINUTE), clock.now_ms())
    assert store.limits() == {"A": RateLimit(3, MINUTE)}
    sink = RecordingSink(tmp_path / "out.jsonl")
    service = service_for(store, sink, FileDeadLetter(tmp_path / "dead.jsonl"), clock, policy)
    clock.advance(1_000)
    report = service.tick()
    assert sorted(p.group_key for p in report.published) == ["A", "A", "A", "B"]
    assert list(report.throttled) == ["B"]
    assert [t["group_key"] for t in store.throttled_groups()] == ["B"]
    assert store.clear_limit("A") and not store.clear_limit("A") and store.limits() == {}
