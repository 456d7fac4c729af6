"""How records travel to the streaming job's stateful step: decoded and packed per shard.

``transformWithStateInPandas`` turns each of its input rows into a Python tuple and back into a
pandas frame, so rows, not bytes, are what it costs. Before the shuffle, :func:`pack` finishes
decoding (``events.decode`` for what the JVM fast path could not prove valid) and packs each
input Arrow batch into one row per shard of group keys, the shard's records as one Arrow IPC
stream: a micro-batch of 50,000 events in Arrow batches of 50,000 records (the streaming session's
``spark.sql.execution.arrow.maxRecordsPerBatch``) reaches the stateful step as a few dozen rows.

The shard of a group is Spark's ``pmod(xxhash64(group_key), shards)``, computed in the JVM for
the records the fast path decoded and by :func:`shard_of` (the same hash, in Python) for the
others, so a group's records always meet in one shard.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from consolidator.rules.events import FieldNames
from consolidator.spark.shards import POISON_GROUP, POISON_SHARD

#: Input rows of the stateful step (:func:`pack`).
PACKED_SCHEMA = "shard int, records binary"
#: The records in a :func:`pack` blob (the decoded records' columns).
RECORD_COLUMNS = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp_ms", pa.int64()),
    ("key", pa.binary()), ("value", pa.binary()), ("group_key", pa.string()), ("item_id", pa.string()),
    ("items", pa.string()), ("poison_reason", pa.string()), ("poison_detail", pa.string()),
])


_M64 = (1 << 64) - 1
_P1, _P2, _P3, _P4, _P5 = (11400714785074694791, 14029467366897019727, 1609587929392839161,
                           9650029242287828579, 2870177450012600261)


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc: int, lane: int) -> int:
    return _rotl((acc + lane * _P2) & _M64, 31) * _P1 & _M64


def xxhash64(data: bytes, seed: int = 42) -> int:
    """XXH64 as Spark's ``xxhash64`` computes it for a string (its UTF-8 bytes, seed 42), signed."""
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M64, (seed + _P2) & _M64, seed & _M64, (seed - _P1) & _M64]
        while i + 32 <= n:
            v = [_round(v[j], int.from_bytes(data[i + 8 * j:i + 8 * j + 8], "little")) for j in range(4)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M64
        for lane in v:
            h = ((h ^ _round(0, lane)) * _P1 + _P4) & _M64
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, int.from_bytes(data[i:i + 8], "little")), 27) * _P1 + _P4) & _M64
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ (int.from_bytes(data[i:i + 4], "little") * _P1 & _M64), 23) * _P2 + _P3) & _M64
        i += 4
    for byte in data[i:]:
        h = _rotl(h ^ (byte * _P5 & _M64), 11) * _P1 & _M64
    h ^= h >> 33
    h = h * _P2 & _M64
    h ^= h >> 29
    h = h * _P3 & _M64
    h ^= h >> 32
    return h - (1 << 64) if h >= 1 << 63 else h


@functools.lru_cache(maxsize=65_536)
def shard_of(group_key: str, shards: int) -> int:
    """``pmod(xxhash64(group_key), shards)``: the shard Spark computes for the same key."""
    return xxhash64(group_key.encode()) % shards


def pack(batches: Iterable, *, names: FieldNames, max_event_bytes: int, shards: int, values=None):
    """``mapInArrow`` step before the shuffle. Input: records with the JVM fast path's columns
    (``group_key``, ``item_id``, ``items``) and ``shard`` where it proved the value valid, else
    ``shard`` null and the record's ``value`` (and ``key``). Those are decoded here by
    ``events.decode`` (:func:`~consolidator.spark.transforms.decode_value`) and placed in their
    group's shard, poison in :data:`POISON_SHARD`. Output: one row per shard present and input
    Arrow batch (:data:`PACKED_SCHEMA`), the shard's records (:data:`RECORD_COLUMNS`) as one
    Arrow IPC stream. ``transformWithStateInPandas`` turns each of its input rows into a Python
    tuple and back into pandas: rows, not bytes, are what it costs. ``values``: the records'
    :class:`~consolidator.sources.formats.ValueFormat` (None: JSON)."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        columns = {name: batch.column(name) for name in batch.schema.names}
        shard = columns.pop("shard")
        if shard.null_count:
            shard, columns = _decode_rest(shard, columns, names, max_event_bytes, shards, values)
        else:
            shard = shard.to_numpy()
        records = pa.RecordBatch.from_arrays(
            [columns[f.name].cast(f.type) if f.name in columns else pa.nulls(batch.num_rows, f.type)
             for f in RECORD_COLUMNS], schema=RECORD_COLUMNS)
        order = np.argsort(shard, kind="stable")
        keys = shard[order]
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        blobs = []
        for start, end in zip(starts, [*starts[1:], len(order)], strict=True):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, RECORD_COLUMNS) as writer:
                writer.write_batch(records.take(pa.array(order[start:end])))
            blobs.append(sink.getvalue().to_pybytes())
        yield pa.RecordBatch.from_arrays([pa.array(keys[starts], pa.int32()), pa.array(blobs, pa.binary())],
                                         names=["shard", "records"])


def _decode_rest(shard, columns: dict, names: FieldNames, max_event_bytes: int, shards: int, values=None):
    """Shards (numpy) and decoded columns once ``events.decode`` did the records without a shard."""
    from consolidator.spark.transforms import decode_value  # imports pyspark: only where needed

    todo = np.flatnonzero(shard.is_null().to_numpy(zero_copy_only=False))
    shard = shard.fill_null(0).to_numpy().astype(np.int64)
    decoded = {name: columns[name].to_pylist() for name in ("group_key", "item_id", "items")}
    decoded |= {"poison_reason": [None] * len(shard), "poison_detail": [None] * len(shard)}
    raw, keys, topics = columns["value"].to_pylist(), columns["key"].to_pylist(), columns["topic"].to_pylist()
    stamps = columns["timestamp_ms"].to_pylist()
    if not names.shape.is_reference and values is None and names.event_time is None:  # a generic shape: the common case in one pass
        from consolidator.spark.decode_shape import decode_shaped

        done = decode_shaped([raw[i] for i in todo], names, max_event_bytes)
        for j, i in enumerate(todo.tolist()):
            if done[0][j] is not None:
                decoded["group_key"][i], decoded["item_id"][i], decoded["items"][i] = (c[j] for c in done[:3])
                shard[i] = shard_of(done[0][j], shards)
                raw[i] = keys[i] = None
        todo = todo[done[3]]
    for i in todo:
        result = decode_value(raw[i] or b"", names, max_event_bytes, values, topics[i] or "")
        for name in decoded:
            decoded[name][i] = result.get(name)
        poison = result["group_key"] == POISON_GROUP
        if result.get("event_time_ms") is not None:
            stamps[i] = result["event_time_ms"]  # the row's time from here on: TTL, month, event times
        shard[i] = POISON_SHARD if poison else shard_of(result["group_key"], shards)
        if not poison:
            raw[i] = keys[i] = None  # only a dead-letter entry needs them
    columns = {**columns, **{name: pa.array(v, pa.string()) for name, v in decoded.items()},
               "value": pa.array(raw, pa.binary()), "key": pa.array(keys, pa.binary()),
               "timestamp_ms": pa.array(stamps, pa.int64())}
    return shard, columns


def unpack(blobs: Iterable[bytes]):
    """The records of :func:`pack` blobs as one Arrow table."""
    return pa.concat_tables([pa.ipc.open_stream(blob).read_all() for blob in blobs])
