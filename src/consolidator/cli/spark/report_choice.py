"""Choosing among replayed policies, without Spark: short ids, the recommendation, near ties and
the dominated policies (pure functions of the figures, :class:`consolidator.cli.spark.report.PolicyFigures`).

- :func:`short_ids`: ``P1``, ``P2``, ... in the order of the figures; the report prints the key.
- :func:`recommend`: the best compaction among the policies whose p95 latency is within the
  bound (ties: lower p95, then the simpler policy: no rate limit, then no TTL; then name).
- :func:`near_ties`: the other policies within the bound whose compaction is within
  ``TIE_TOLERANCE`` of the recommended one's: the choice among them is not decided by the
  figures, and the report says so.
- :func:`differing`: the settings in which two policies differ, each with what the figures do
  not measure about it (what the near-tie advice names).
- :func:`dominated`: a policy is dominated when another one has at least its compaction and at
  most its p95 latency, one of them strictly better: there is no reason to pick it.
"""

from __future__ import annotations

from collections.abc import Sequence

TIE_TOLERANCE = 0.02  # compaction within 2 % of the recommended policy's counts as a tie


def short_ids(figures: Sequence) -> dict[str, str]:
    """Policy name -> ``P1``, ``P2``, ... (in the order given)."""
    return {f.policy: f"P{index}" for index, f in enumerate(figures, start=1)}


def simpler(f) -> tuple[bool, bool]:
    """Sorts the simpler policy first: without a rate limit, then without a TTL."""
    return (getattr(f, "rate_limit", None) is not None, bool(getattr(f, "ttl_ms", 0)))


def recommend(figures: Sequence, max_p95_ms: float):
    """The policy with the best compaction whose p95 latency is within ``max_p95_ms`` (ties: lower
    p95, then the simpler one, :func:`simpler`, then name); None when no policy meets the bound."""
    within = [f for f in figures if f.batches_out and f.latency_p95_ms <= max_p95_ms]
    return min(within, key=lambda f: (-f.compaction_ratio, f.latency_p95_ms, simpler(f), f.policy), default=None)


#: (setting, attribute, what the figures do not measure about it)
_SETTINGS = (
    ("debounce", "debounce_ms", "a shorter debounce reacts sooner to a quiet group"),
    ("hard window", "hard_window_ms", "a shorter hard window bounds the wait of a busy group"),
    ("max batch size", "max_batch_size", "a smaller batch is cheaper to retry"),
    ("rate limit", "rate_limit", "no rate limit is simpler; a limit protects the consumer from a burst"),
    ("TTL", "ttl_ms", "a shorter TTL drops stale events sooner"),
)


def differing(a, b) -> list[tuple[str, str]]:
    """(setting, advice) for each setting in which the policies of figures ``a`` and ``b`` differ."""
    return [(name, advice) for name, attribute, advice in _SETTINGS
            if getattr(a, attribute, None) != getattr(b, attribute, None)]


def near_ties(figures: Sequence, best, max_p95_ms: float, tolerance: float = TIE_TOLERANCE) -> list:
    """The other policies within the bound whose compaction is at least ``1 - tolerance`` of
    ``best``'s, best compaction first."""
    floor = best.compaction_ratio * (1 - tolerance)
    return sorted((f for f in figures if f is not best and f.batches_out and f.latency_p95_ms <= max_p95_ms
                   and f.compaction_ratio >= floor), key=lambda f: (-f.compaction_ratio, f.latency_p95_ms))


def dominated(figures: Sequence) -> dict[str, str]:
    """Dominated policy name -> the name of one policy that dominates it (best compaction first)."""
    ranked = sorted((f for f in figures if f.batches_out), key=lambda f: (-f.compaction_ratio, f.latency_p95_ms))
    found: dict[str, str] = {}
    for f in ranked:
        for other in ranked:
            if (other is not f and other.compaction_ratio >= f.compaction_ratio
                    and other.latency_p95_ms <= f.latency_p95_ms
                    and (other.compaction_ratio > f.compaction_ratio or other.latency_p95_ms < f.latency_p95_ms)):
                found[f.policy] = other.policy
                break
    return found
