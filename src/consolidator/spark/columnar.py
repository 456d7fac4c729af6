"""The replay's columnar simulation: many groups at once, on arrays, for a plain policy.

For a policy without rate limit, TTL or byte cap, a group that never holds ``max_batch_size``
rows at once is a sequence of sessions: an event starts a new session when it arrives after the
tick that would flush the open one, ``next_tick(min(start + hard_window, newest + debounce))``,
and each session is one claim of all its rows at that tick (``hard_window`` when the tick is a
hard window past its first event, else ``idle``). Sessions, rows (one per month bucket and item),
claim order and latencies are computed with numpy over all groups of a chunk; messages are still
:func:`consolidator.batch.build_message`'s. A group where a session reaches ``max_batch_size``
rows, or any group under another policy, is simulated by :func:`replay.simulate` on its events.

Guarantee: exactly :func:`replay.simulate_group`'s batches, members, messages, latencies and
replayed counts (``tests/unit/test_columnar.py``, a property test over random histories).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from consolidator.batch import Member, build_message, encode
from consolidator.events import SourcePosition
from consolidator.policy import FlushReason, Policy


def is_plain(policy: Policy) -> bool:
    """The columnar path models this policy (no rate limit, TTL or byte cap)."""
    return (policy.rate_limit is None and not policy.rate_overrides and not policy.ttl_ms
            and policy.max_batch_bytes is None)


@dataclass(frozen=True, slots=True)
class Chunk:
    """Valid events of whole groups, in simulation order (group, timestamp, position), each
    position once per group (``first`` marks the first occurrence, the others are replays)."""

    group: np.ndarray  # int64 group index, into ``group_keys``
    group_keys: list[str]
    ts: np.ndarray  # int64 record timestamp (ms)
    topic: np.ndarray  # int64 rank of the topic in ``topics`` (sorted, so ranks compare like names)
    topics: list[str]
    partition: np.ndarray  # int64
    offset: np.ndarray  # int64
    item: list[str]
    items: list[str]  # JSON [[sku, quantity], ...]
    first: np.ndarray  # bool: not a replayed position

    @property
    def size(self) -> int:
        return len(self.ts)


def make_chunk(group_keys: Sequence[str], ts, topics: Sequence[str], partition, offset,
               item: Sequence[str], items: Sequence[str]) -> Chunk:
    """Sorts events (any order) into a :class:`Chunk`."""
    keys, group = np.unique(np.asarray(group_keys, dtype=object), return_inverse=True)
    names, topic = np.unique(np.asarray(topics, dtype=object), return_inverse=True)
    ts = np.asarray(ts, dtype=np.int64)
    partition = np.asarray(partition, dtype=np.int64)
    offset = np.asarray(offset, dtype=np.int64)
    group, topic = group.astype(np.int64), topic.astype(np.int64)
    order = np.lexsort((offset, partition, topic, ts, group))
    group, ts, topic, partition, offset = group[order], ts[order], topic[order], partition[order], offset[order]
    # replays: a position seen earlier in the group (stable sort keeps simulation order among equals)
    by_position = np.lexsort((offset, partition, topic, group))
    same = np.zeros(len(ts), dtype=bool)
    if len(ts) > 1:
        a, b = by_position[1:], by_position[:-1]
        same[a] = ((group[a] == group[b]) & (topic[a] == topic[b]) & (partition[a] == partition[b])
                   & (offset[a] == offset[b]))
    order_list = order.tolist()
    return Chunk(group, keys.tolist(), ts, topic, names.tolist(), partition, offset,
                 [item[i] for i in order_list], [items[i] for i in order_list], ~same)


def _ceil_tick(at: np.ndarray, interval: int) -> np.ndarray:
    return -(-at // interval) * interval


def sessions(group: np.ndarray, ts: np.ndarray, policy: Policy) -> np.ndarray:
    """Start indices of the sessions of sorted, replay-free events (see the module docstring)."""
    n = len(ts)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    interval = policy.tick_interval_ms
    breaks = np.ones(n, dtype=bool)
    breaks[1:] = (group[1:] != group[:-1]) | (ts[1:] > _ceil_tick(ts[:-1] + policy.debounce_ms, interval))
    starts = np.flatnonzero(breaks)
    ends = np.append(starts[1:], n)
    long = ts[ends - 1] > _ceil_tick(ts[starts] + policy.hard_window_ms, interval)
    extra = []
    for start, end in zip(starts[long].tolist(), ends[long].tolist(), strict=True):
        while True:  # hard-window splits inside one idle segment
            limit = -(-(int(ts[start]) + policy.hard_window_ms) // interval) * interval
            start = start + int(np.searchsorted(ts[start:end], limit, side="right"))
            if start >= end:
                break
            extra.append(start)
    if extra:
        starts = np.sort(np.concatenate([starts, np.asarray(extra, dtype=np.int64)]))
    return starts


@dataclass(frozen=True, slots=True)
class Batch:
    """One claim: what the replay's output row needs."""

    group_key: str
    reason: FlushReason
    flushed_at_ms: int
    members: tuple[Member, ...]
    message: dict

    @property
    def latencies_ms(self) -> list[int]:
        return [self.flushed_at_ms - m.first_seen_ms for m in self.members]


def _parse(text: str) -> tuple[tuple[str, int], ...]:
    try:
        return tuple(map(tuple, orjson.loads(text)))
    except orjson.JSONDecodeError:  # an integer beyond 64 bits: same values, slower
        return tuple(map(tuple, json.loads(text)))


def simulate_chunk(chunk: Chunk, policy: Policy) -> tuple[list[Batch], set[int]]:
    """Batches of every group of ``chunk`` the columnar path can simulate, in group then flush
    order, and the groups (indices) it cannot (a session reaches ``max_batch_size`` rows): those
    must go to :func:`replay.simulate`."""
    keep = np.flatnonzero(chunk.first)
    group, ts = chunk.group[keep], chunk.ts[keep]
    topic, partition, offset = chunk.topic[keep], chunk.partition[keep], chunk.offset[keep]
    n = len(ts)
    if n == 0:
        return [], set()
    starts = sessions(group, ts, policy)
    session = np.zeros(n, dtype=np.int64)
    session[starts[1:]] = 1
    session = np.cumsum(session)
    month = ts.astype("datetime64[ms]").astype("datetime64[M]").astype(np.int64)
    item_names, item = np.unique(np.asarray([chunk.item[i] for i in keep.tolist()], dtype=object),
                                 return_inverse=True)
    item = item.astype(np.int64)
    # rows: one per (session, month bucket, item); the newest position's event gives the items
    order = np.lexsort((offset, partition, topic, item, month, session))
    s_o, m_o, i_o = session[order], month[order], item[order]
    row_break = np.ones(n, dtype=bool)
    row_break[1:] = (s_o[1:] != s_o[:-1]) | (m_o[1:] != m_o[:-1]) | (i_o[1:] != i_o[:-1])
    row_start = np.flatnonzero(row_break)
    row_last = np.append(row_start[1:], n) - 1
    t_o = ts[order]
    first_seen = np.minimum.reduceat(t_o, row_start)
    last_update = np.maximum.reduceat(t_o, row_start)
    merged = np.diff(np.append(row_start, n))
    newest = order[row_last]  # event index of the row's newest position
    row_session = s_o[row_start]
    rows_per_session = np.bincount(row_session, minlength=len(starts))
    too_full = set(group[starts[rows_per_session >= policy.max_batch_size]].tolist())
    # claim order inside a session: (first_seen, position)
    claim = np.lexsort((offset[newest], partition[newest], topic[newest], first_seen, row_session))
    ends = np.append(starts[1:], n)
    hard_at = _ceil_tick(ts[starts] + policy.hard_window_ms, policy.tick_interval_ms)
    idle_at = _ceil_tick(ts[ends - 1] + policy.debounce_ms, policy.tick_interval_ms)
    tick = np.minimum(hard_at, idle_at)
    hard = tick - ts[starts] >= policy.hard_window_ms
    session_rows = np.append(0, np.cumsum(rows_per_session))
    cols = (newest[claim].tolist(), first_seen[claim].tolist(), last_update[claim].tolist(),
            merged[claim].tolist())
    event = keep  # event index in the chunk of a kept index
    parsed: dict[str, tuple] = {}
    batches: list[Batch] = []
    topics, keys = chunk.topics, chunk.group_keys
    s_group, s_tick, s_hard = group[starts].tolist(), tick.tolist(), hard.tolist()
    for s in range(len(starts)):
        g = s_group[s]
        if g in too_full:
            continue
        members = []
        for r in range(session_rows[s], session_rows[s + 1]):
            e = cols[0][r]
            source = int(event[e])
            text = chunk.items[source]
            items = parsed.get(text)
            if items is None:
                items = parsed[text] = _parse(text)
            members.append(Member(SourcePosition(topics[topic[e]], int(partition[e]), int(offset[e])),
                                  chunk.item[source], items, cols[1][r], cols[2][r], cols[3][r], int(ts[e])))
        reason = FlushReason.HARD_WINDOW if s_hard[s] else FlushReason.IDLE
        key = keys[g]
        batches.append(Batch(key, reason, s_tick[s], tuple(members),
                             build_message(key, members, reason, flushed_at_ms=s_tick[s])))
    del item_names
    return batches, too_full


def body(batch: Batch) -> str:
    return encode(batch.message).decode()
