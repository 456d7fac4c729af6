"""Decoding after the shuffle: the records whose group key the JVM proved, under a generic shape.

Under a generic event shape the replay's :func:`~consolidator.spark.transforms.decode` (with
``defer``) decodes in Python before the shuffle only the values whose group key the JVM cannot
prove (:func:`~consolidator.spark.transforms.claimed_group_key`); the others cross the shuffle
as their raw value, with the group key claimed and ``items`` null, and are decoded here, once,
in the per-group function: :func:`~consolidator.spark.decode_shape.decode_kept` for the common
case, ``events.decode`` (:func:`~consolidator.spark.transforms.decode_value`) for the rest, which
finds poison with the same reason and detail as before the shuffle.

The common case keeps the parsed event and its values at the outputs' paths
(:class:`~consolidator.spark.decode_shape.Kept`) for the simulation, which would otherwise parse
the items text again (``columnar_shape``; ``Chunk.event`` for the reference): one parse per
event, no items text. The event is the one that text reads back as, so batches are the same bytes.

Guarantee: group keys, item ids, poison reasons and details are what :func:`decode` without
``defer`` gives for the same records, the kept event what its items text reads back as
(``tests/unit/test_deferred.py``). A decoded group key other than the claimed one is a broken
proof: it raises, never a wrong batch.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from consolidator.rules.events import FieldNames
from consolidator.spark.decode_shape import Kept, decode_kept
from consolidator.spark.shards import POISON_GROUP
from consolidator.spark.transforms import decode_value


class BrokenClaim(AssertionError):
    """``events.decode`` gave a group key other than the one the JVM proved: a bug, never data."""


def decode_deferred(data: pa.Table, names: FieldNames,
                    max_event_bytes: int) -> tuple[pa.Table, list[Kept | None] | None]:
    """``data`` (:data:`~consolidator.spark.transforms.DECODED_SCHEMA` columns) with its deferred
    rows (``items`` null, a group key other than :data:`POISON_GROUP`) decoded, and what each
    row keeps where the common case decoded it (None elsewhere; None for all: none deferred).
    Those rows get their item id and ``items`` null (the kept event says it); the rows
    ``events.decode`` decodes get their item id and items text, poison :data:`POISON_GROUP`, its
    reason and detail."""
    deferred = pc.and_(pc.is_null(data["items"]), pc.not_equal(data["group_key"], POISON_GROUP))
    if isinstance(deferred, pa.ChunkedArray):
        deferred = deferred.combine_chunks()
    if not pc.any(deferred).as_py():
        return data, None
    where = pc.indices_nonzero(deferred)
    raw = data["value"].take(where).to_pylist()
    claimed = data["group_key"].take(where).to_pylist()
    groups, item_ids, kept, rest = decode_kept(raw, names, max_event_bytes)
    count = len(claimed)
    texts: list[str | None] = [None] * count
    reasons: list[str | None] = [None] * count
    details: list[str | None] = [None] * count
    for index in rest:
        decoded = decode_value(raw[index] or b"", names, max_event_bytes)
        groups[index], item_ids[index], texts[index] = decoded["group_key"], decoded.get("item_id"), decoded.get("items")
        reasons[index], details[index] = decoded.get("poison_reason"), decoded.get("poison_detail")
    for index, (group, claim) in enumerate(zip(groups, claimed, strict=True)):
        if group != claim and group != POISON_GROUP:
            raise BrokenClaim(f"events.decode gave group key {group!r}, the JVM proved {claim!r}")
    for name, new in (("group_key", groups), ("item_id", item_ids), ("items", texts), ("poison_reason", reasons),
                      ("poison_detail", details)):
        column = data[name].combine_chunks()
        data = data.set_column(data.schema.get_field_index(name), name,
                               pc.replace_with_mask(column, deferred, pa.array(new, column.type)))
    parsed: list[Kept | None] = [None] * data.num_rows
    for index, row in enumerate(where.to_pylist()):
        parsed[row] = kept[index]
    return data, parsed
