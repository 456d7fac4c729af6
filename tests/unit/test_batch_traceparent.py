"""A published batch's own ``traceparent`` is a function of the batch: the trace of its first
member context, a span id from its batch id; none when no member has a context."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from consolidator.rules.tracecontext import (
    TraceContext,
    batch_traceparent,
    parse_traceparent,
    publish_span_id,
)

HEX = "0123456789abcdef"
ids = st.text(HEX, min_size=32, max_size=32)
contexts = st.builds(
    lambda t, s, f: TraceContext(f"00-{t}-{s}-{f}"),
    st.text(HEX, min_size=32, max_size=32).filter(lambda t: t != "0" * 32),
    st.text(HEX, min_size=16, max_size=16).filter(lambda s: s != "0" * 16),
    st.sampled_from(["00", "01"]))


@given(ids, st.lists(st.none() | contexts, max_size=5))
def test_the_batch_traceparent_is_the_first_members_trace_under_the_batchs_span(batch_id, members):
    found = batch_traceparent(batch_id, members)
    present = [m for m in members if m is not None]
    if not present:
        assert found is None
        return
    assert parse_traceparent(found) == found
    _, trace_id, span_id, flags = found.split("-")
    assert (trace_id, flags) == (present[0].traceparent[3:35], present[0].traceparent[-2:])
    assert span_id == publish_span_id(batch_id) != "0" * 16
    assert batch_traceparent(batch_id, list(members)) == found  # a re-publish: the same value


@given(st.text(max_size=40))
def test_a_publish_span_id_is_never_all_zeros(batch_id):
    span_id = publish_span_id(batch_id)
    assert len(span_id) == 16 and set(span_id) <= set(HEX) and span_id != "0" * 16


def test_the_span_id_is_the_batch_ids_first_half():
    assert publish_span_id("00f067aa0ba902b7" + "1" * 16) == "00f067aa0ba902b7"
    assert publish_span_id("0" * 32) != "0" * 16
