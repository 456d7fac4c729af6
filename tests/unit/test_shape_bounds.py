"""The int64 bound of a generic shape's outputs is sound, and ``batch.int64_prefix`` gives with it
exactly what probing prefixes gives: random specs over random events, with integers near the
int64 bound so that claims do split."""

from __future__ import annotations

import random

import pytest
from random_shapes import random_shape

from consolidator.rules.batch import Member, _newest_per_item, fit_count, int64_prefix
from consolidator.rules.events import SourcePosition
from consolidator.rules.shape import ValueFault, aggregate, retain, within_int64
from consolidator.rules.shape_bounds import int64_safe


def _event(rng: random.Random) -> dict:
    big = [2**62, 2**63 - 1, -(2**63), 2**64 - 1, 3, 2.5]
    return {"amount": rng.choice(big), "price": rng.choice(big), "props": {"page": "/p", "n": rng.choice(big)},
            "lines": [{"code": rng.choice("ab"), "n": rng.choice(big)} for _ in range(rng.randrange(3))],
            "tags": rng.choice(big)}


def _probed(members: list[Member], shape) -> int:
    """int64_prefix's probing, without the bound."""
    def fits(m: int) -> bool:
        newest = sorted(_newest_per_item(members[:m]).values(), key=lambda x: x.position)
        return within_int64(aggregate(shape, [x.items.event for x in newest]))
    return fit_count(fits, lambda m: min(m, len(members)))


@pytest.mark.parametrize("seed", range(200))
def test_int64_prefix_with_the_bound_is_the_probed_prefix(seed):
    rng = random.Random(seed)
    shape = random_shape(rng)
    members = []
    for _ in range(rng.randrange(1, 12)):
        try:  # what ingest keeps of a valid event
            view = retain(_event(rng), shape)
        except ValueFault:
            continue
        members.append(Member(SourcePosition("t", 0, rng.randrange(50)), f"u{rng.randrange(4)}", view, 0, 0))
    events = [m.items.event for m in members]
    if int64_safe(shape, events):  # sound: every prefix's outputs fit
        assert all(within_int64(aggregate(shape, events[:m])) for m in range(1, len(events) + 1))
    if members:
        assert int64_prefix(members, shape) == _probed(members, shape)
