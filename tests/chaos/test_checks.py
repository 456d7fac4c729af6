"""The chaos checkers: quiet on a clean result, and each one flags its own corruption."""

from __future__ import annotations

import json

import pytest

from chaos.checks import CHECKERS, CORRUPTIONS, Snapshot, corrupt, run_checks, self_test
from consolidator.demo.check import Produced
from consolidator.rules.batch import Member, build_message, encode
from consolidator.rules.events import SourcePosition
from consolidator.rules.policy import FlushReason

T0 = 1_795_000_000_000


def clean_snapshot() -> Snapshot:
    """Two items of WH-1 (one coalesced from two events) in one sent batch, and one poison record."""
    produced = [
        Produced(("orders", 0, 0), T0, "WH-1", "A", False),
        Produced(("orders", 0, 1), T0, "WH-1", "B", False),
        Produced(("orders", 0, 2), T0, "WH-1", "A", False),  # coalesces into A's row
        Produced(("orders", 0, 3), T0, None, None, True),
    ]
    members = [Member(SourcePosition("orders", 0, 1), "B", (("S", 1),), T0, T0),
               Member(SourcePosition("orders", 0, 2), "A", (("S", 2),), T0, T0, merged_events=2)]
    message = build_message("WH-1", members, FlushReason.IDLE, T0)
    rows = [{"src_topic": "orders", "src_partition": 0, "src_offset": m.position.offset, "group_key": "WH-1",
             "item_id": m.item_id, "batch_id": message["batch_id"], "status": "SENT"} for m in members]
    poison = {"kind": "poison", "reason": "not_json", "source": {"topic": "orders", "partition": 0, "offset": 3}}
    return Snapshot(
        produced=produced,
        acknowledged={p.position for p in produced},
        output_raw=encode(message) + b"\n" + encode(message) + b"\n",  # at least once: same bytes twice
        dead_letter_raw=json.dumps(poison).encode() + b"\n",
        rows=rows,
        batches=[{"batch_id": message["batch_id"], "group_key": "WH-1", "state": "SENT", "last_error": None,
                  "claimed_at_ms": T0, "kind": "batch"}],
    )


def test_a_clean_result_has_no_violation():
    assert run_checks(clean_snapshot()) == {name: [] for name in CHECKERS}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_each_checker_flags_its_corruption(name):
    violations = run_checks(corrupt(clean_snapshot(), name))
    assert violations[name], f"{name} did not flag its corruption"


def test_the_lost_checker_bites_when_every_published_batch_went_dead_first():
    """A sink outage: every batch went DEAD (the dead letter holds it) and was redriven."""
    clean = clean_snapshot()
    message = json.loads(clean.output_raw.split(b"\n")[0])
    entry = {"kind": "dead_batch", "reason": "max_attempts", "detail": "sink down", "attempts": 5, "batch": message}
    clean.dead_letter_raw += json.dumps(entry).encode() + b"\n"
    assert run_checks(clean)["lost"] == []
    assert run_checks(corrupt(clean, "lost"))["lost"]


def test_self_test_reports_every_checker_as_biting():
    assert self_test(clean_snapshot()) == dict.fromkeys(CORRUPTIONS, True)
    assert set(CORRUPTIONS) == set(CHECKERS), "every checker has a corruption that proves it"
