"""An MSK record's header values: lists of bytes, each an integer from -128 to 255 (unsigned, or
signed as Java writes them); anything else (a bool, a float, a number outside that range) makes
the record's envelope bad, never a silently changed value."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consolidator.rules.events import PoisonReason
from consolidator.sources.msk import parse_event

GOOD = {"topic": "orders", "partition": 1, "offset": 5, "timestamp": 1_795_000_000_000,
        "key": None, "value": "eyJhIjoxfQ=="}


def read(raw: list) -> bytes | None:
    """The value the event's reading gives a header of ``raw`` (None: the envelope is bad)."""
    for exact in (False, True):
        parsed = parse_event({"eventSource": "aws:kafka", "records": {"orders-1": [{**GOOD, "headers": [{"h": raw}]}]}},
                             exact=exact)
        if parsed.rejected:
            assert [r.reason for r in parsed.rejected] == [PoisonReason.BAD_ENVELOPE]
            found = None
        else:
            ((name, found),) = parsed.records[0].headers
            assert name == "h"
        if not exact:
            fast = found
    assert fast == found, "the inline reading and the step-by-step reading agree"
    return found


def reference(raw: list) -> bytes | None:
    if any(type(b) is not int for b in raw):
        return None
    if all(0 <= b <= 255 for b in raw):
        return bytes(raw)
    if all(-128 <= b <= 255 for b in raw):
        return bytes(b & 0xFF for b in raw)
    return None


@pytest.mark.parametrize(("raw", "expected"), [
    ([], b""), ([0, 1, 255], b"\x00\x01\xff"), ([-1, -128, 1, 0], b"\xff\x80\x01\x00"), (list(b"00-ab"), b"00-ab"),
    ([True], None), ([0, False], None), ([48, True], None), ([1.0], None), (["a"], None), ([None], None),
    ([256], None), ([-129], None), ([300, -1], None), ([-1, 128], b"\xff\x80"),
])
def test_a_header_value_is_a_list_of_signed_or_unsigned_bytes(raw, expected):
    assert read(raw) == expected


@given(st.lists(st.integers(-200, 300) | st.booleans() | st.sampled_from([0, 1, -1, 127, 128, 255, 256]), max_size=6))
def test_a_header_value_reads_as_the_definition(raw):
    assert read(raw) == reference(raw)
