"""The replay's columnar simulation: many groups at once, on arrays, for a plain policy.

For a policy without rate limit, TTL or byte cap, a group that never holds ``max_batch_size``
rows at once is a sequence of sessions: an event starts a new session when it arrives after the
tick that would flush the open one, ``next_tick(min(start + hard_window, newest + debounce))``,
and each session is one claim of all its rows at that tick (``hard_window`` when the tick is a
hard window past its first event, else ``idle``). Sessions, rows (one per month bucket and item),
claim order and latencies are computed with numpy over all groups of a chunk; each message is
written as the text :func:`consolidator.rules.batch.encode` gives for
:func:`~consolidator.rules.batch.build_message`, without building the dict. A group where a session
reaches ``max_batch_size`` rows, or any group under another policy, is simulated by
:func:`replay.simulate` on its events.

Guarantee: exactly :func:`replay.simulate_group`'s batches, members, messages, latencies and
replayed counts (``tests/unit/test_columnar.py``, a property test over random histories).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from consolidator.rules.batch import id_head, id_of, iso_ms, topic_fields
from consolidator.rules.buffer import BufferedEvent
from consolidator.rules.events import MAX_QUANTITY, FieldNames, SourcePosition
from consolidator.rules.policy import (
    FlushReason,
    Policy,
    due_at_ms,
    hard_window_at_ms,
    idle_at_ms,
    is_full,
    next_tick_ms,
)
from consolidator.rules.shape import EventView, stored_items


def is_plain(policy: Policy, names: FieldNames) -> bool:
    """The columnar path models this policy for events read with ``names`` (no rate limit, TTL,
    byte cap, generic shape or event time field: it writes the version 1 message itself)."""
    return is_plain_policy(policy) and names.shape.is_reference and not names.event_times


def is_plain_policy(policy: Policy) -> bool:
    """No rate limit, TTL or byte cap: what the columnar paths model, whatever the shape."""
    return (policy.rate_limit is None and not policy.rate_overrides and not policy.ttl_ms
            and policy.max_batch_bytes is None)


@dataclass(frozen=True, slots=True)
class Chunk:
    """Valid events of whole groups, in simulation order (group, timestamp, position), each
    position once per group (``first`` marks the first occurrence, the others are replays).
    Strings are ranks into sorted name lists, so ranks compare like the names."""

    group: np.ndarray  # int64 rank into ``group_keys``
    group_keys: list[str]
    ts: np.ndarray  # int64 record timestamp (ms)
    topic: np.ndarray  # int64 rank into ``topics``
    topics: list[str]
    partition: np.ndarray  # int64
    offset: np.ndarray  # int64
    item: np.ndarray  # int64 rank into ``item_ids``
    item_ids: list[str]
    items: pa.Array  # string: JSON [[sku, quantity], ...], or {"event": ...}; null where ``parsed`` has it
    first: np.ndarray  # bool: not a replayed position
    parsed: list | None = None  # generic shape: per event, its decode_shape.Kept (None: read ``items``)
    event_ms: np.ndarray | None = None  # int64 event time (an event time field is configured), else None

    def kept(self, index: int):
        """The event's ``decode_shape.Kept`` if decoding kept it, else None (read ``items``)."""
        return None if self.parsed is None else self.parsed[index]

    def event(self, index: int) -> BufferedEvent:
        kept = self.kept(index)
        return BufferedEvent(SourcePosition(self.topics[self.topic[index]], int(self.partition[index]),
                                            int(self.offset[index])), int(self.ts[index]),
                             self.item_ids[self.item[index]],
                             parse_items(self.items[index].as_py()) if kept is None else kept.view(),
                             None if self.event_ms is None else int(self.event_ms[index]))


def ranks(values) -> tuple[np.ndarray, list[str]]:
    """Each string's rank among the distinct values, and those values sorted (as Python sorts)."""
    encoded = pc.dictionary_encode(pa.array(values, pa.string()) if isinstance(values, list) else values)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    names = encoded.dictionary.to_pylist()
    order = sorted(range(len(names)), key=names.__getitem__)
    rank = np.empty(len(names), dtype=np.int64)
    rank[order] = np.arange(len(names), dtype=np.int64)
    return rank[encoded.indices.to_numpy(zero_copy_only=False)], [names[i] for i in order]


def make_chunk(group_keys, ts, topics, partition, offset, item, items, parsed: list | None = None,
               event_ms=None) -> Chunk:
    """Sorts events (any order; lists or Arrow arrays, strings non-null but ``items`` where
    ``parsed`` holds the event; ``event_ms``: their event times, or None) into a :class:`Chunk`."""
    group, keys = ranks(group_keys)
    topic, names = ranks(topics)
    item, item_ids = ranks(item)
    ts, partition, offset = (np.asarray(c, dtype=np.int64) for c in (ts, partition, offset))
    order = np.lexsort((offset, partition, topic, ts, group))
    group, ts, topic, partition, offset, item = (c[order] for c in (group, ts, topic, partition, offset, item))
    # replays: a position seen earlier in the group (stable sort keeps simulation order among equals)
    by_position = np.lexsort((offset, partition, topic, group))
    same = np.zeros(len(ts), dtype=bool)
    if len(ts) > 1:
        a, b = by_position[1:], by_position[:-1]
        same[a] = ((group[a] == group[b]) & (topic[a] == topic[b]) & (partition[a] == partition[b])
                   & (offset[a] == offset[b]))
    items = pa.array(items, pa.string()) if isinstance(items, list) else items
    return Chunk(group, keys, ts, topic, names, partition, offset, item, item_ids, items.take(order), ~same,
                 None if parsed is None else [parsed[i] for i in order.tolist()],
                 None if event_ms is None else np.asarray(event_ms, dtype=np.int64)[order])


_ISO_RANGE = (-30_610_224_000_000, 253_402_300_800_000)  # years 1000 to 9999: numpy writes them as iso_ms


def _iso(ms: np.ndarray) -> list[str]:
    """:func:`consolidator.rules.batch.iso_ms` of each value."""
    if len(ms) and (ms.min() < _ISO_RANGE[0] or ms.max() >= _ISO_RANGE[1]):
        return [iso_ms(v) for v in ms.tolist()]
    return [f"{text}Z" for text in np.datetime_as_string(ms.astype("datetime64[ms]"), unit="ms").tolist()]


def sessions(group: np.ndarray, ts: np.ndarray, policy: Policy) -> np.ndarray:
    """Start indices of the sessions of sorted, replay-free events (see the module docstring)."""
    n = len(ts)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    breaks = np.ones(n, dtype=bool)
    breaks[1:] = (group[1:] != group[:-1]) | (ts[1:] > next_tick_ms(idle_at_ms(ts[:-1], policy), policy))
    starts = np.flatnonzero(breaks)
    ends = np.append(starts[1:], n)
    long = ts[ends - 1] > next_tick_ms(hard_window_at_ms(ts[starts], policy), policy)
    extra = []
    for start, end in zip(starts[long].tolist(), ends[long].tolist(), strict=True):
        while True:  # hard-window splits inside one idle segment
            limit = next_tick_ms(hard_window_at_ms(int(ts[start]), policy), policy)
            start = start + int(np.searchsorted(ts[start:end], limit, side="right"))
            if start >= end:
                break
            extra.append(start)
    if extra:
        starts = np.sort(np.concatenate([starts, np.asarray(extra, dtype=np.int64)]))
    return starts


#: :func:`simulate_chunk`'s batches: what the replay's output row needs; ``body`` is the v1
#: message exactly as :func:`consolidator.rules.batch.encode` writes it, ``latencies_ms`` is per member
#: in claim order (flushed_at - first_seen).
BATCH_SCHEMA = pa.schema([
    ("group_key", pa.string()), ("batch_id", pa.string()), ("reason", pa.string()), ("flushed_at_ms", pa.int64()),
    ("members", pa.int32()), ("event_count", pa.int64()), ("latencies_ms", pa.list_(pa.int64())),
    ("body", pa.string()),
])
_REASONS = pa.array([str(FlushReason.IDLE), str(FlushReason.HARD_WINDOW)])  # indexed by "hard"


def parse_items(text: str) -> tuple[tuple[str, int], ...] | EventView:
    """The ``items`` column (JSON ``[[sku, quantity], ...]``) as the event's tuple; what a
    generic shape keeps (``{"event": ...}``) as its :class:`~consolidator.rules.shape.EventView`."""
    if text.startswith("{"):
        return stored_items(text)
    pairs = orjson.loads(text)
    if any(type(quantity) is not int for _, quantity in pairs):  # orjson reads an integer beyond
        pairs = json.loads(text)  # 64 bits as a float: the standard library keeps it exact
    return tuple(map(tuple, pairs))


def _joined(offsets: np.ndarray, values: pa.Array, separator: str) -> pa.Array:
    """Per list (``values[offsets[i]:offsets[i + 1]]``), its strings joined with ``separator``."""
    return pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values), separator)


class _Totals:
    """The summed quantity of each sku in each session: the message's ``items``, one entry per
    (session, sku), sessions in order and skus sorted as Python sorts them (``batch.build_message``
    sorts them so). Each distinct ``items`` text is parsed once.

    Sums are int64: exact, since quantities are 0 to 2**63-1 and a session whose float sum
    passes 2**62 is ``risky`` (its exact total is then taken by :meth:`exact`, with Python ints;
    a session over int64 is handed back, so its wrapped sums are never written)."""

    def __init__(self, texts: pa.Array, row_session: np.ndarray, sessions_count: int) -> None:
        encoded = pc.dictionary_encode(texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts)
        self.parsed = [parse_items(text) for text in encoded.dictionary.to_pylist()]
        self.text_of_row = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        pairs_of_text = np.array([len(p) for p in self.parsed], dtype=np.int64)
        skus, self.sku_names = ranks([sku for p in self.parsed for sku, _ in p])
        quantities = np.array([q for p in self.parsed for _, q in p], dtype=np.uint64).astype(np.int64)
        row_pairs = pairs_of_text[self.text_of_row]
        row_of_pair = np.repeat(np.arange(len(row_pairs)), row_pairs)
        first_pair = np.append(0, np.cumsum(pairs_of_text))[:-1]
        pair = (np.repeat(first_pair[self.text_of_row] - (np.cumsum(row_pairs) - row_pairs), row_pairs)
                + np.arange(len(row_of_pair)))
        pair_session, pair_sku, pair_quantity = row_session[row_of_pair], skus[pair], quantities[pair]
        self.risky = np.bincount(pair_session, weights=pair_quantity.astype(np.float64),
                                 minlength=sessions_count) > 2.0**62
        order = np.lexsort((pair_sku, pair_session))
        pair_session, pair_sku = pair_session[order], pair_sku[order]
        entry = np.ones(len(order), dtype=bool)
        entry[1:] = (pair_session[1:] != pair_session[:-1]) | (pair_sku[1:] != pair_sku[:-1])
        start = np.flatnonzero(entry)
        self.quantity = (np.add.reduceat(pair_quantity[order], start) if len(start)
                         else np.zeros(0, dtype=np.int64))
        self.sku = pair_sku[start]
        self.entries_per_session = np.bincount(pair_session[start], minlength=sessions_count)

    def entries_of(self) -> np.ndarray:
        return np.append(0, np.cumsum(self.entries_per_session))

    def sku_json(self) -> pa.Array:
        return pa.array([orjson.dumps(name).decode() for name in self.sku_names], pa.string()).take(self.sku)

    def exact(self, session: int, rows_of: list[int]) -> int:
        """The session's total quantity as a Python int (its rows are ``rows_of[session]`` up to
        the next session's)."""
        return sum(q for row in self.text_of_row[rows_of[session]:rows_of[session + 1]].tolist()
                   for _, q in self.parsed[row])


class SessionPlan(NamedTuple):
    """A chunk's sessions, rows and flushes under a plain policy, as both columnar paths read
    them. Events are the chunk's first sightings (``keep``: their indices in the chunk); a row is
    one (session, month bucket, item), its event the newest position's; arrays of rows are in
    (session, month, item) order."""

    keep: np.ndarray  # event -> chunk index
    group: np.ndarray  # event -> group index
    ts: np.ndarray
    topic: np.ndarray
    partition: np.ndarray
    offset: np.ndarray
    item: np.ndarray
    starts: np.ndarray  # session -> its first event
    ends: np.ndarray  # session -> one past its last event
    session: np.ndarray  # event -> session
    newest: np.ndarray  # row -> the event of its newest position
    first_seen: np.ndarray  # row -> its first event's timestamp
    row_session: np.ndarray  # row -> session
    rows_per_session: np.ndarray
    full: np.ndarray  # group -> a session of it reaches max_batch_size rows (handed back)
    claim: np.ndarray  # rows in claim order: (session, first_seen, position)
    tick: np.ndarray  # session -> its flush tick
    hard: np.ndarray  # session -> flushed by the hard window


def plan_sessions(chunk: Chunk, policy: Policy) -> SessionPlan | None:
    """The :class:`SessionPlan` of ``chunk`` under ``policy``; None when it has no event."""
    keep = np.flatnonzero(chunk.first)
    group, ts = chunk.group[keep], chunk.ts[keep]
    topic, partition, offset = chunk.topic[keep], chunk.partition[keep], chunk.offset[keep]
    n = len(ts)
    if n == 0:
        return None
    starts = sessions(group, ts, policy)
    session = np.zeros(n, dtype=np.int64)
    session[starts[1:]] = 1
    session = np.cumsum(session)
    month = ts.astype("datetime64[ms]").astype("datetime64[M]").astype(np.int64)
    item = chunk.item[keep]
    # rows: one per (session, month bucket, item); the newest position's event gives the items
    order = np.lexsort((offset, partition, topic, item, month, session))
    s_o, m_o, i_o = session[order], month[order], item[order]
    row_break = np.ones(n, dtype=bool)
    row_break[1:] = (s_o[1:] != s_o[:-1]) | (m_o[1:] != m_o[:-1]) | (i_o[1:] != i_o[:-1])
    row_start = np.flatnonzero(row_break)
    row_last = np.append(row_start[1:], n) - 1
    t_o = ts[order]
    first_seen = np.minimum.reduceat(t_o, row_start)
    newest = order[row_last]  # event index of the row's newest position
    row_session = s_o[row_start]
    rows_per_session = np.bincount(row_session, minlength=len(starts))
    full = np.zeros(len(chunk.group_keys), dtype=bool)
    full[group[starts[is_full(rows_per_session, policy)]]] = True
    # claim order inside a session: (first_seen, position)
    claim = np.lexsort((offset[newest], partition[newest], topic[newest], first_seen, row_session))
    ends = np.append(starts[1:], n)
    # a session's flush: the first tick at or after it is due (its oldest row is its first
    # event, its newest update its last); the reason is the hard window if it has passed then
    # (a full session's group is handed back, whatever its tick)
    tick = next_tick_ms(due_at_ms(rows_per_session, ts[starts], ts[ends - 1], policy,
                                  minimum=np.minimum, where=np.where), policy)
    hard = tick >= hard_window_at_ms(ts[starts], policy)
    return SessionPlan(keep, group, ts, topic, partition, offset, item, starts, ends, session, newest, first_seen,
                       row_session, rows_per_session, full, claim, tick, hard)


def simulate_chunk(chunk: Chunk, policy: Policy) -> tuple[pa.RecordBatch, set[int]]:
    """Batches (:data:`BATCH_SCHEMA`) of every group of ``chunk`` the columnar path can simulate,
    in group then flush order, and the groups (indices) it cannot (a session reaches
    ``max_batch_size`` rows, or its quantities together pass int64 so that a claim may be split):
    those must go to :func:`replay.simulate`."""
    plan = plan_sessions(chunk, policy)
    if plan is None:
        return pa.RecordBatch.from_pylist([], schema=BATCH_SCHEMA), set()
    (keep, group, ts, topic, partition, offset, item, starts, ends, session, newest, first_seen, row_session,
     rows_per_session, full, claim, tick, hard) = plan
    kept = ~full[group[starts]]  # sessions of the groups this path simulates
    # members and batch-id lines: rows in position order inside each session
    by_position = np.lexsort((offset[newest], partition[newest], topic[newest], row_session))
    member = newest[by_position]
    topic_of = topic[member]
    texts = [pc.cast(pa.array(c), pa.string()) for c in (partition[member], offset[member])]
    topic_json = pa.array([orjson.dumps(t).decode() for t in chunk.topics], pa.string()).take(topic_of)
    # batch-id fields (batch.batch_id): length-prefixed topic, epoch (0 here), partition, offset
    lengths = [pc.cast(pc.binary_length(t), pa.string()) for t in texts]
    topic_head = pa.array([topic_fields(t, 0) for t in chunk.topics], pa.string()).take(topic_of)
    line = pc.binary_join_element_wise(topic_head, lengths[0], ":", texts[0], lengths[1], ":", texts[1], "")
    member_json = pc.binary_join_element_wise('{"offset":', texts[1], ',"partition":', texts[0], ',"topic":',
                                              topic_json, "}", "")
    per_session = pa.array(np.append(0, np.cumsum(rows_per_session)).astype(np.int32))
    lines = pc.binary_join(pa.ListArray.from_arrays(per_session, line), "")
    members = pc.binary_join(pa.ListArray.from_arrays(per_session, member_json), ",")
    # per item, the row with the newest position (rows of one item differ by month bucket)
    by_item = np.lexsort((offset[newest], partition[newest], topic[newest], item[newest], row_session))
    item_rows = item[newest[by_item]]
    last_of_item = np.ones(len(by_item), dtype=bool)
    last_of_item[:-1] = (row_session[by_item][1:] != row_session[by_item][:-1]) | (item_rows[1:] != item_rows[:-1])
    chosen = newest[by_item[last_of_item]]
    item_rows_of = np.append(0, np.cumsum(np.bincount(session[chosen], minlength=len(starts)))).tolist()
    sessions_count = len(starts)
    # rows that are not their item's newest (an item in two month buckets): they count toward the
    # int64 bound below, as split.bounded_prefix counts every member of a claim
    older = newest[by_item[~last_of_item]]
    older_total = np.zeros(sessions_count, dtype=object)
    for s, text in zip(session[older].tolist(), chunk.items.take(keep[older]).to_pylist(), strict=True):
        older_total[s] += sum(q for _, q in parse_items(text))
    totals = _Totals(chunk.items.take(keep[chosen]), session[chosen], sessions_count)
    # groups with a session whose quantities may pass int64 (a claim may then be split): simulated
    overflow = {int(group[starts[s]]) for s in np.flatnonzero(totals.risky | (older_total != 0)).tolist()
                if totals.exact(s, item_rows_of) + older_total[s] > MAX_QUANTITY}
    if overflow:
        full[sorted(overflow)] = True
    kept = ~full[group[starts]]
    out = pa.array(np.flatnonzero(kept))
    keys = chunk.group_keys
    heads = [id_head(k) for k in keys]
    line_bytes = pc.cast(lines.take(out), pa.binary()).to_pylist()
    ids = pa.array([id_of(heads[g], line) for g, line in zip(group[starts[kept]].tolist(), line_bytes, strict=True)],
                   pa.string())
    item_json = pa.array([orjson.dumps(name).decode() for name in chunk.item_ids], pa.string())
    item_ids = _joined(np.asarray(item_rows_of), item_json.take(item[chosen]), ",").take(out)
    entries = pc.binary_join_element_wise('{"quantity":', pc.cast(pa.array(totals.quantity), pa.string()),
                                          ',"sku":', totals.sku_json(), "}", "")
    items = _joined(totals.entries_of(), entries, ",").take(out)
    key_json = pa.array([orjson.dumps(k).decode() for k in keys], pa.string())
    counts = {name: pc.cast(pa.array(values[kept]), pa.string())
              for name, values in (("events", ends - starts), ("item_count", np.diff(item_rows_of)))}
    bodies = pc.binary_join_element_wise(
        '{"batch_id":"', ids, '","event_count":', counts["events"], ',"first_event_at":"',
        pa.array(_iso(ts[starts[kept]]), pa.string()), '","flush_reason":"', _REASONS.take(hard[kept].astype(np.int8)),
        '","flushed_at":"', pa.array(_iso(tick[kept]), pa.string()), '","group_key":', key_json.take(group[starts[kept]]),
        ',"item_count":', counts["item_count"], ',"item_ids":[', item_ids, '],"items":[', items,
        '],"last_event_at":"', pa.array(_iso(ts[ends[kept] - 1]), pa.string()), '","members":[', members.take(out),
        '],"schema_version":1}', "")
    latencies = (tick[row_session] - first_seen)[claim]  # claim order: rows of a session together
    offsets = np.append(0, np.cumsum(rows_per_session[kept])).astype(np.int32)
    columns = [pa.array(keys, pa.string()).take(group[starts[kept]]), ids,
               _REASONS.take(hard[kept].astype(np.int8)), pa.array(tick[kept]),
               pa.array(rows_per_session[kept], pa.int32()), pa.array((ends - starts)[kept]),
               pa.ListArray.from_arrays(pa.array(offsets), pa.array(latencies[kept[row_session[claim]]])),
               bodies]
    return pa.RecordBatch.from_arrays(columns, schema=BATCH_SCHEMA), set(np.flatnonzero(full).tolist())
