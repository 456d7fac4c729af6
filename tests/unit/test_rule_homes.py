"""The table "Where each rule lives" of docs/architecture.md stays true: every rule named there
has its functions in its module, and no other module of ``src/`` writes the rule again (its
tell-tale arithmetic or literal appears in its home module only)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
HEADING = "## Where each rule lives"
RULES = ("due", "flush tick", "claim", "split", "rate limit admit", "TTL expiry", "batch id", "batch message",
         "dead-letter entry", "event decode", "event time", "reference simulation")

_ARITHMETIC = r"(?:[-+]|[<>]=?|==)"  # a sum, a difference or a comparison


def _used_in_arithmetic(*names: str) -> re.Pattern[str]:
    name = "|".join(names)
    return re.compile(rf"{_ARITHMETIC}\s*[\w.]*\b(?:{name})\b|\b(?:{name})\b\s*{_ARITHMETIC}")


#: Per rule, what betrays a copy of it: none of these may match outside the rule's home module.
TELL_TALES: dict[str, list[re.Pattern[str]]] = {
    "due": [_used_in_arithmetic("hard_window_ms", "debounce_ms"),
            re.compile(r"(?:[<>]=?|==)\s*[\w.]*\bmax_batch_size\b|\bmax_batch_size\b\s*(?:[<>]=?|==)")],
    "flush tick": [re.compile(r"-\(-")],  # ceiling to the tick grid: -(-at // interval) * interval
    "TTL expiry": [_used_in_arithmetic(r"policy\.ttl_ms")],  # the event TTL (a lock's ttl_ms is another)
    "batch id": [re.compile(r"consolidator-batch-v")],
}


def _table() -> dict[str, tuple[str, list[str]]]:
    """rule -> (module path, the function names of its row)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert HEADING in text, f"docs/architecture.md has no section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, list[str]]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("rule", "---") or not line.startswith("|"):
            continue
        module = cells[1].strip("`")
        functions = re.findall(r"`([A-Za-z_][\w.]*)`", cells[2].split("(")[0])
        rows[cells[0]] = (module, functions)
    return rows


def _module_name(path: str) -> str:
    return "consolidator." + path.removesuffix(".py").replace("/", ".")


def test_the_table_names_every_rule_once():
    assert sorted(_table()) == sorted(RULES)


@pytest.mark.parametrize("rule", RULES)
def test_each_named_function_lives_in_its_module(rule):
    path, functions = _table()[rule]
    assert (SRC / "consolidator" / path).is_file(), path
    assert functions, f"{rule}: no function named"
    module = importlib.import_module(_module_name(path))
    for name in functions:
        assert callable(getattr(module, name, None)), f"{rule}: {path} has no function {name}"


@pytest.mark.parametrize("rule", sorted(TELL_TALES))
def test_a_rule_is_written_in_its_home_only(rule):
    home = SRC / "consolidator" / _table()[rule][0]
    copies = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
              for path in sorted(SRC.rglob("*.py")) if path != home
              for number, line in enumerate(path.read_text().splitlines(), 1)
              if any(pattern.search(line) for pattern in TELL_TALES[rule])]
    assert not copies, f"the {rule} rule is written again outside {home.relative_to(ROOT)}:\n" + "\n".join(copies)


@pytest.mark.parametrize("pattern, line", [
    ("due", "due = (counts >= policy.max_batch_size) | (now_ms - oldest >= policy.hard_window_ms)"),
    ("due", "hard_at = _ceil_tick(ts[starts] + policy.hard_window_ms, interval)"),
    ("due", "np.minimum(oldest + policy.hard_window_ms, newest + policy.debounce_ms)"),
    ("flush tick", "return -(-at // interval) * interval"),
    ("TTL expiry", "wake = min(wake, min(newest) + policy.ttl_ms + 1)"),
    ("batch id", '_ID_HEAD = b"consolidator-batch-v25:batch"'),
])
def test_the_tell_tales_catch_the_copies_they_exist_for(pattern, line):
    assert any(p.search(line) for p in TELL_TALES[pattern])


@pytest.mark.parametrize("line", [
    "debounce_ms=round(self.debounce_seconds * 1000),",  # a setting converted, not the rule
    "top = max([*ys.values(), *(f.hard_window_ms / 1000 for f in figures)]) * 1.2 or 1",
    "lock=RedisLock.from_url(settings.redis_url, ttl_ms=round(settings.lock_ttl_seconds * 1000),",
    "self._expires_at = started + self.ttl_ms / 1000",
    "group.limit = self.policy.max_batch_size",
])
def test_the_tell_tales_leave_other_uses_alone(line):
    assert not any(p.search(line) for patterns in TELL_TALES.values() for p in patterns)


def test_the_due_rule_is_the_same_on_scalars_and_arrays():
    """``is_due`` and ``due_at_ms`` on numpy arrays agree with ``due_reason`` and ``next_due``
    on each group, and ``due_at_ms`` is the first time ``is_due`` holds."""
    from consolidator.rules.policy import (
        GroupStats,
        Policy,
        due_at_ms,
        due_reason,
        is_due,
        next_due,
    )

    rng = np.random.default_rng(7)
    policy = Policy(debounce_ms=300, hard_window_ms=1_000, max_batch_size=5, tick_interval_ms=100)
    count = rng.integers(1, 8, 500)
    oldest = rng.integers(0, 2_000, 500)
    newest = oldest + rng.integers(0, 1_500, 500)
    now = 2_500
    due = is_due(count, oldest, newest, now, policy)
    at = due_at_ms(count, oldest, newest, policy, minimum=np.minimum, where=np.where)
    for c, o, n, d, a in zip(count.tolist(), oldest.tolist(), newest.tolist(), due.tolist(), at.tolist(), strict=True):
        stats = GroupStats("g", c, o, n)
        assert d == (due_reason(stats, now, policy) is not None) == is_due(c, o, n, now, policy)
        assert next_due(stats, policy) == (due_reason(stats, a, policy), a) and a == due_at_ms(c, o, n, policy)
        assert due_reason(stats, a - 1, policy) is None or c >= policy.max_batch_size
