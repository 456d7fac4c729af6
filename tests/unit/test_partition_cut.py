"""Ingest's per-partition cut: what is made durable of a partition is a prefix of what arrived."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from consolidator.rules.events import SourcePosition
from consolidator.services.ingest import PartitionCut

positions = st.builds(SourcePosition, st.sampled_from(["orders", "refunds"]), st.integers(0, 2), st.integers(0, 50))


def test_a_cut_keeps_the_records_before_it_and_only_in_its_partition():
    cut = PartitionCut()
    assert not cut and cut.keeps(SourcePosition("orders", 0, 10**18))
    cut.at(SourcePosition("orders", 0, 7))
    cut.at(SourcePosition("orders", 0, 9))  # a later failure does not move the cut up
    assert cut
    assert cut.keeps(SourcePosition("orders", 0, 6))
    assert not cut.keeps(SourcePosition("orders", 0, 7)) and not cut.keeps(SourcePosition("orders", 0, 9))
    assert cut.keeps(SourcePosition("orders", 1, 100)) and cut.keeps(SourcePosition("refunds", 0, 100))


@given(st.lists(positions, max_size=20), st.lists(positions, max_size=40))
def test_what_a_cut_keeps_is_a_prefix_of_each_partition(cuts, arrived):
    cut = PartitionCut()
    for position in cuts:
        cut.at(position)
    for position in arrived:
        lowest = min((c.offset for c in cuts if c[:2] == position[:2]), default=None)
        assert cut.keeps(position) == (lowest is None or position.offset < lowest)
