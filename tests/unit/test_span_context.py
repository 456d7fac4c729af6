"""A record's trace context becomes the remote span context the W3C propagator would extract from
its headers, whatever the context holds (the ingest's contexts are built straight from their fields)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.trace import NonRecordingSpan, get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from consolidator.rules.tracecontext import TraceContext
from consolidator.support import tracing
from consolidator.support.tracing import span_context

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def propagated(trace: TraceContext):
    carrier = {"traceparent": trace.traceparent}
    if trace.tracestate:
        carrier["tracestate"] = trace.tracestate
    span = get_current_span(TraceContextTextMapPropagator().extract(carrier))
    return span.get_span_context() if isinstance(span, NonRecordingSpan) and span.get_span_context().is_valid else None


hexes = st.text("0123456789abcdef", min_size=1, max_size=1)
parents = (st.sampled_from([VALID, VALID[:-2] + "00", VALID[:-2] + "ff", "01" + VALID[2:], "01" + VALID[2:] + "-x",
                            "ff" + VALID[2:], VALID.upper(), " " + VALID, VALID + " ", VALID + "-x",
                            f"00-{'0' * 32}-00f067aa0ba902b7-01", f"00-4bf92f3577b34da6a3ce929d0e0e4736-{'0' * 16}-01",
                            ""])
           | st.builds(lambda i, j, f: f"00-{i + 1:032x}-{j + 1:016x}-{f:02x}", st.integers(0, 2**128 - 2),
                       st.integers(0, 2**64 - 2), st.integers(0, 255))
           | st.builds(lambda i, c: VALID[:i] + c + VALID[i + 1:], st.integers(0, 55), hexes | st.just("-")))
states = st.none() | st.sampled_from(["", "rojo=00f067aa0ba902b7", "a=1,b=2", "x", "a=1,a=2", "=", "a=" + "b" * 600,
                                      "a=" + "b" * 9000]) | st.text(max_size=12)


@settings(max_examples=400, deadline=None)
@given(parents, states)
def test_the_span_context_is_what_the_propagator_extracts(parent, state):
    trace = TraceContext(parent, state)
    made, expected = span_context(trace), propagated(trace)
    assert made == expected
    if expected is not None:
        assert made.is_remote and made.trace_flags == expected.trace_flags
        assert list((made.trace_state or {}).items()) == list((expected.trace_state or {}).items())


def reference_parent_and_links(contexts, limit):
    """The definition: the first valid context is the parent; each distinct valid one (by its
    traceparent, the first one's tracestate) a link, the first ``limit`` of them; the count of all."""
    seen = {}
    for trace in contexts:
        if trace is not None and trace.traceparent not in seen:
            found = propagated(trace)
            if found is not None:
                seen[trace.traceparent] = found
    found = list(seen.values())
    return (found[0] if found else None), found[:limit], len(found)


few_parents = st.sampled_from([VALID, "01" + VALID[2:], VALID.upper(), "ff" + VALID[2:], " " + VALID, "garbage"]) | \
    st.builds(lambda i: f"00-{i + 1:032x}-{i + 1:016x}-01", st.integers(0, 6))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.none() | st.builds(TraceContext, few_parents, st.none() | st.sampled_from(["a=1", "b=2", "x"])),
                max_size=12), st.integers(1, 4))
def test_parent_links_and_count_are_the_definitions(contexts, limit):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tracing, "MAX_LINKS", limit)
        parent, links, count = tracing.parent_and_links(contexts)
    expected_parent, expected_links, expected_count = reference_parent_and_links(contexts, limit)
    assert (get_current_span(parent).get_span_context() if parent is not None else None) == expected_parent
    assert [link.context for link in links] == expected_links
    assert [list(link.context.trace_state.items()) for link in links] == [
        list(c.trace_state.items()) for c in expected_links]
    assert count == expected_count
