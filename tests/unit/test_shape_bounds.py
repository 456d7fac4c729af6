"""The bound of a generic shape's outputs (int64, the double range) is sound, and
``split.bounded_prefix`` gives with it exactly what probing prefixes gives: random specs over
random events, with integers near the int64 bound and doubles near the largest one, so that
claims do split."""

from __future__ import annotations

import random

import pytest
from random_shapes import random_shape

from consolidator.rules.batch import Member, newest_per_item
from consolidator.rules.events import SourcePosition
from consolidator.rules.shape import ValueFault, aggregate, retain, within_bounds
from consolidator.rules.shape_bounds import bounds_safe
from consolidator.rules.split import bounded_prefix, fit_count


def _event(rng: random.Random) -> dict:
    big = [2**62, 2**63 - 1, -(2**63), 2**64 - 1, 3, 2.5, 1.7e308, -1.7e308, 8.9e307, 5e-324]
    return {"amount": rng.choice(big), "price": rng.choice(big), "props": {"page": "/p", "n": rng.choice(big)},
            "lines": [{"code": rng.choice("ab"), "n": rng.choice(big)} for _ in range(rng.randrange(3))],
            "tags": rng.choice(big)}


def _probed(members: list[Member], shape) -> int:
    """bounded_prefix's probing, without the bound."""
    def fits(m: int) -> bool:
        newest = sorted(newest_per_item(members[:m]).values(), key=lambda x: x.position)
        return within_bounds(aggregate(shape, [x.items.event for x in newest]))
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
    if bounds_safe(shape, events):  # sound: every prefix's outputs fit
        assert all(within_bounds(aggregate(shape, events[:m])) for m in range(1, len(events) + 1))
    if members:
        assert bounded_prefix(members, shape) == _probed(members, shape)
