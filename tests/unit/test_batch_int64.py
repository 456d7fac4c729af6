"""A batch's summed quantities fit a signed 64-bit integer: a claim is split where a sum would
pass 2**63-1, by one rule both engines use (``split.bounded_prefix`` inside ``fitting_prefix``)."""

from __future__ import annotations

import random

import orjson

from consolidator.rules.batch import Member, build_message, newest_per_item
from consolidator.rules.events import MAX_QUANTITY, SourcePosition
from consolidator.rules.policy import FlushReason, Policy
from consolidator.rules.shape import EventView, Shape, aggregate, parse_outputs, within_bounds
from consolidator.rules.split import (
    MessageOptions,
    bounded_prefix,
    fit_claims,
    fit_count,
    message_bytes,
    split_to_fit,
)

BIG = 2**62


def member(offset: int, item: str, *items: tuple[str, int]) -> Member:
    return Member(SourcePosition("orders", 0, offset), item, tuple(items), offset, offset)


def sums_fit(members: list[Member]) -> bool:
    return all(i["quantity"] <= MAX_QUANTITY for i in build_message("W", members, FlushReason.IDLE, 0)["items"])


def test_the_member_that_would_pass_int64_starts_the_next_batch():
    members = [member(0, "A", ("S", BIG)), member(1, "B", ("S", BIG - 1)), member(2, "C", ("S", 1)),
               member(3, "D", ("T", 5))]
    assert bounded_prefix(members) == 2  # BIG + BIG - 1 = 2**63 - 1 fits; + 1 does not
    batches = split_to_fit("W", members, FlushReason.IDLE, 0, None)
    assert [[m.item_id for m in b] for b in batches] == [["A", "B"], ["C", "D"]]
    assert all(sums_fit(b) for b in batches)


def test_sums_count_the_newest_row_of_each_item_as_the_message_does():
    older = member(5, "A", ("S", BIG))
    newer = member(9, "A", ("S", 1))  # the same item in the next month: only this row counts
    assert bounded_prefix([newer, older, member(10, "B", ("S", BIG)), member(11, "C", ("S", BIG - 2))]) == 4
    assert bounded_prefix([older, newer, member(10, "B", ("S", BIG)), member(11, "C", ("S", BIG))]) == 3


def test_small_quantities_never_split_and_a_member_alone_is_a_batch():
    members = [member(i, f"I{i}", ("S", 10**15), ("T", 3)) for i in range(500)]
    assert bounded_prefix(members) == 500
    assert fit_claims("W", [(FlushReason.FULL, members)], 0, Policy()) == [(FlushReason.FULL, members)]
    assert bounded_prefix([member(0, "A", ("S", MAX_QUANTITY)), member(1, "B", ("S", 1))]) == 1


def test_random_claims_split_into_batches_whose_sums_fit():
    rng = random.Random(5)
    for _ in range(200):
        # each member as ingest accepts it: its own sums fit (one entry per sku)
        members = [member(i, f"I{rng.randrange(8)}", *[(sku, rng.choice([1, 2**61, 3 * 2**61]))
                                                      for sku in rng.sample("ST", rng.randrange(1, 3))])
                   for i in range(rng.randrange(1, 12))]
        batches = split_to_fit("W", members, FlushReason.IDLE, 0, None)
        assert [m for b in batches for m in b] == members and all(b for b in batches)
        assert all(sums_fit(b) for b in batches)


# -- a generic shape: the one-pass bound gives what the prefix-by-prefix search gives ------------

SHAPE_SPEC = [{"name": "n", "op": "count"}, {"name": "total", "op": "sum", "path": "a.v"},
              {"name": "low", "op": "min", "path": "b"}, {"name": "seen", "op": "distinct", "path": "b"},
              {"name": "latest", "op": "last", "path": "c"}, {"name": "oldest", "op": "first", "path": "c"}]
NUMBERS = [1, -1, 2**62, -(2**62), 2**63 - 1, -(2**63), 3 * 2**61, 0.5, 1e19, None]  # what ingest lets a sum read
ANY = [*NUMBERS, 2**64 - 1, "x", [2**63], {"k": -(2**63) - 1}]  # a first or last reads any value


def searched_prefix(members: list[Member], shape: Shape) -> int:
    """``bounded_prefix`` without its one-pass bound: every prefix :func:`fit_count` probes is
    aggregated and checked."""
    def fits(m: int) -> bool:
        newest = sorted(newest_per_item(members[:m]).values(), key=lambda x: x.position)
        return within_bounds(aggregate(shape, [x.items.event for x in newest]))
    return fit_count(fits, lambda m: min(m, len(members)))


def generic_member(offset: int, item: str, event: dict) -> Member:
    return Member(SourcePosition("events", 0, offset), item, EventView(event), offset, offset)


def test_a_generic_claims_prefix_is_the_searched_one():
    shape = Shape(parse_outputs(orjson.dumps(SHAPE_SPEC).decode()))
    rng = random.Random(9)
    cases = [[{"a": {"v": 2**62}}, {"a": {"v": 2**62}}, {"a": {"v": -(2**62)}}],  # the sum passes int64 midway
             [{"a": {"v": -(2**63)}}, {"a": {"v": 1}}, {"a": {"v": -1}}],
             [{"c": {"deep": [2**64 - 1]}}, {"c": 1}], [{"c": 1}, {"c": [2**63]}]]
    for _ in range(400):
        cases.append([{"a": {"v": rng.choice(NUMBERS)}, "b": rng.choice(NUMBERS), "c": rng.choice(ANY)}
                      for _ in range(rng.randrange(1, 9))])
    splits = 0
    for events in cases:
        members = [generic_member(i, f"I{rng.randrange(5)}", e) for i, e in enumerate(events)]
        assert bounded_prefix(members, shape) == searched_prefix(members, shape), events
        splits += bounded_prefix(members, shape) < len(members)
    assert splits >= 20  # the cases hold claims that split, not only ones that fit whole


def test_the_byte_cap_cuts_first_then_the_int64_sums_of_what_it_kept():
    """A generic sum can leave int64 and come back (2^62, 1, 2^62, -2^62: the whole claim fits,
    its first three do not): the batch is the prefix under the byte cap (three), then of it the
    prefix whose sums fit (two), as the Lambda path's claim takes it; never three."""
    shape = Shape(parse_outputs('[{"name": "s", "op": "sum", "path": "amount"}]'), False, None)
    members = [Member(SourcePosition("events", 0, i), f"u{i}", EventView({"amount": amount}), 0, 0)
               for i, amount in enumerate([BIG, 1, BIG, -BIG])]
    options = MessageOptions(shape)
    cap = message_bytes("W", members[:3], FlushReason.FULL, 0, options)
    batches = split_to_fit("W", members, FlushReason.FULL, 0, cap, options)
    assert [[m.item_id for m in b] for b in batches] == [["u0", "u1"], ["u2", "u3"]]
    assert [build_message("W", b, FlushReason.FULL, 0, shape=shape)["aggregates"]["s"] for b in batches] == [BIG + 1, 0]
