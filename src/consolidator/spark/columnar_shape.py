"""The replay's columnar simulation under a generic event shape (version 2 messages).

The sessions, rows, claims and latencies of a plain policy do not depend on the shape: they are
computed here with numpy over all groups of a chunk, by the rule of
:mod:`consolidator.spark.columnar` (whose helpers this module uses). What the shape changes is
the message: each session's ``aggregates`` are what :func:`consolidator.rules.shape.aggregate` gives
over the newest event of each item (position order: its values at the outputs' paths, looked
up once per event, reduced by :func:`~consolidator.rules.shape.reduce_values`), each member carries
its own event projected by :func:`consolidator.rules.shape.payload_of`, and the body is written as the
text :func:`consolidator.rules.batch.encode` gives for :func:`~consolidator.rules.batch.build_message`,
without building the message dict. Each member's event is parsed and its payload encoded once.

A group is handed back to :func:`replay.simulate` (the reference) when one of its sessions
reaches ``max_batch_size`` rows, or when an output of a session might leave its bounds (int64,
the double range) on some prefix of its claim (the bound of :mod:`consolidator.rules.shape_bounds`;
there :func:`consolidator.rules.split.fit_claims` may split it).

Guarantee: exactly :func:`replay.simulate_group`'s batches, members, messages and latencies
(``tests/unit/test_columnar_shape.py``, a property test over random shapes and histories).
"""

from __future__ import annotations

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from consolidator.rules.batch import id_head, id_of, topic_fields
from consolidator.rules.events import FieldNames
from consolidator.rules.policy import Policy
from consolidator.rules.shape import EventView, Shape, payload_of, reduce_values
from consolidator.rules.shape_bounds import (
    DOUBLE_SAFE,
    bound_weights,
    looked_values,
    may_leave_bounds,
)
from consolidator.spark.columnar import (
    _REASONS,
    BATCH_SCHEMA,
    Chunk,
    _iso,
    is_plain_policy,
    plan_sessions,
)

_SORTED = orjson.OPT_SORT_KEYS


def is_plain_shaped(policy: Policy, names: FieldNames) -> bool:
    """A plain policy (no rate limit, TTL or byte cap) for events read with ``names``: a generic
    event shape, no event time field."""
    return not names.shape.is_reference and is_plain_policy(policy) and not names.event_times


def _aggregates(shape: Shape, looked: list[list]) -> dict[str, object]:
    """:func:`consolidator.rules.shape.aggregate` over the events whose values are ``looked``."""
    return {o.name: len(looked) if o.path is None else reduce_values(o, [v for values in looked
                                                                         if (v := values[k]) is not None])
            for k, o in enumerate(shape.outputs)}


def _kept(chunk: Chunk, rows: np.ndarray, shape: Shape) -> list[tuple[str | None, list]]:
    """The member payload text (None: the shape carries none) and the outputs' values of each of
    the chunk's ``rows``: as decoded (``chunk.parsed``), else from its items text (the stored
    ``{"event": ...}``), parsed once."""
    rows_list = rows.tolist()
    kept: list = [None] * len(rows_list)
    if chunk.parsed is not None:
        kept = [None if (k := chunk.kept(row)) is None else (k.payload, k.looked) for row in rows_list]
    missing = [j for j, k in enumerate(kept) if k is None]
    if missing:
        texts = chunk.items.take(pa.array([rows_list[j] for j in missing], pa.int64())).to_pylist()
        for j, text in zip(missing, texts, strict=True):
            event = orjson.loads(text)["event"]
            payload = None
            if shape.carries_payload:
                payload = orjson.dumps(payload_of(EventView(event), shape), option=_SORTED).decode()
            kept[j] = (payload, looked_values(shape, event))
    return kept


def simulate_chunk_shaped(chunk: Chunk, policy: Policy, names: FieldNames) -> tuple[pa.RecordBatch, set[int]]:
    """Batches (:data:`~consolidator.spark.columnar.BATCH_SCHEMA`, version 2 bodies) of every group
    of ``chunk`` this path can simulate under ``policy`` (plain) and the shape of ``names``, in group
    then flush order, and the groups (indices) it hands back to :func:`replay.simulate`."""
    shape = names.shape
    assert not shape.is_reference and is_plain_shaped(policy, names)
    plan = plan_sessions(chunk, policy)
    if plan is None:
        return pa.RecordBatch.from_pylist([], schema=BATCH_SCHEMA), set()
    (keep, group, ts, topic, partition, offset, item, starts, ends, session, newest, first_seen, row_session,
     rows_per_session, full, claim, tick, hard) = plan
    # members: rows in position order inside each session (their events, once each)
    member = newest[np.lexsort((offset[newest], partition[newest], topic[newest], row_session))]
    row_bounds = np.append(0, np.cumsum(rows_per_session)).tolist()
    # per item, the row with the newest position (rows of one item differ by month bucket), then
    # those in position order: the events the outputs read
    by_item = np.lexsort((offset[newest], partition[newest], topic[newest], item[newest], row_session))
    item_rows = item[newest[by_item]]
    last_of_item = np.ones(len(by_item), dtype=bool)
    last_of_item[:-1] = (row_session[by_item][1:] != row_session[by_item][:-1]) | (item_rows[1:] != item_rows[:-1])
    chosen_by_item = newest[by_item[last_of_item]]  # (session, item id) order: the item ids sorted
    chosen = chosen_by_item[np.lexsort((offset[chosen_by_item], partition[chosen_by_item], topic[chosen_by_item],
                                        session[chosen_by_item]))]
    item_bounds = np.append(0, np.cumsum(np.bincount(session[chosen], minlength=len(starts)))).tolist()
    # batch-id lines and member entries, by position inside each session
    partition_text = pc.cast(pa.array(partition[member]), pa.string()).to_pylist()
    offset_text = pc.cast(pa.array(offset[member]), pa.string()).to_pylist()
    topic_of = topic[member].tolist()
    topic_json = [orjson.dumps(t).decode() for t in chunk.topics]
    topic_field = [topic_fields(t, 0) for t in chunk.topics]  # the replay: every topic at epoch 0
    item_json = [orjson.dumps(name).decode() for name in chunk.item_ids]
    member_item = item[member].tolist()
    member_list = member.tolist()
    looked: dict[int, list] = {}  # event index -> its values at the outputs' paths (parsed once)
    entry = []  # per member row, its entry of "members"
    for r, (index, (payload, values)) in enumerate(zip(member_list, _kept(chunk, keep[member], shape), strict=True)):
        looked[index] = values
        head = "{" if payload is None else f'{{"event":{payload},'
        entry.append(f'{head}"item_id":{item_json[member_item[r]]},"offset":{offset_text[r]},'
                     f'"partition":{partition_text[r]},"topic":{topic_json[topic_of[r]]}}}')
    line = [f"{topic_field[t]}{len(p)}:{p}{len(o)}:{o}" for t, p, o in zip(topic_of, partition_text, offset_text,
                                                                          strict=True)]
    handed: set[int] = set()
    # sessions whose rows' weights may add up beyond the bounds (shape_bounds): handed back (a
    # float sum of the integer weights, compared with half of int64, errs on the safe side)
    if may_leave_bounds(shape):
        weights = np.array([bound_weights(shape, looked[i]) for i in member_list], dtype=np.float64).reshape(-1, 2)
        totals = np.add.reduceat(weights, np.asarray(row_bounds[:-1]), axis=0)
        at_risk = (totals[:, 0] > 2.0**62) | ~(totals[:, 1] <= DOUBLE_SAFE)
        handed.update(group[starts[at_risk]].tolist())
    keys = chunk.group_keys
    key_json = [orjson.dumps(k).decode() for k in keys]
    heads = [id_head(k) for k in keys]
    reasons = _REASONS.to_pylist()
    chosen_looked = [looked[i] for i in chosen.tolist()]
    chosen_json = [item_json[i] for i in item[chosen_by_item].tolist()]
    body_groups: list[int] = []
    ids, bodies = [], []
    for s, (g, at, by_hard, first_at, last_at, count) in enumerate(zip(
            group[starts].tolist(), _iso(tick), hard.tolist(), _iso(ts[starts]), _iso(ts[ends - 1]),
            (ends - starts).tolist(), strict=True)):
        if full[g] or g in handed:
            continue
        ra, rb = row_bounds[s], row_bounds[s + 1]
        ia, ib = item_bounds[s], item_bounds[s + 1]
        aggregates = orjson.dumps(_aggregates(shape, chosen_looked[ia:ib]), option=_SORTED).decode()
        bid = id_of(heads[g], "".join(line[ra:rb]).encode())
        ids.append(bid)
        body_groups.append(g)
        bodies.append(f'{{"aggregates":{aggregates},"batch_id":"{bid}","event_count":{count},'
                      f'"first_event_at":"{first_at}","flush_reason":"{reasons[by_hard]}","flushed_at":"{at}",'
                      f'"group_key":{key_json[g]},"item_count":{ib - ia},"item_ids":[{",".join(chosen_json[ia:ib])}],'
                      f'"last_event_at":"{last_at}","members":[{",".join(entry[ra:rb])}],"schema_version":2}}')
    if handed:
        full[sorted(handed)] = True
        ids = [i for i, g in zip(ids, body_groups, strict=True) if g not in handed]
        bodies = [b for b, g in zip(bodies, body_groups, strict=True) if g not in handed]
    kept = ~full[group[starts]]
    latencies = (tick[row_session] - first_seen)[claim]  # claim order: rows of a session together
    offsets = np.append(0, np.cumsum(rows_per_session[kept])).astype(np.int32)
    columns = [pa.array(keys).take(group[starts[kept]]), pa.array(ids, pa.string()),
               _REASONS.take(hard[kept].astype(np.int8)), pa.array(tick[kept]),
               pa.array(rows_per_session[kept], pa.int32()), pa.array((ends - starts)[kept]),
               pa.ListArray.from_arrays(pa.array(offsets), pa.array(latencies[kept[row_session[claim]]])),
               pa.array(bodies, pa.string())]
    return pa.RecordBatch.from_arrays(columns, schema=BATCH_SCHEMA), set(np.flatnonzero(full).tolist())
