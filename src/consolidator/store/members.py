"""A batch's member rows, found from the batch row (schema 8; every batch since schema 11).

The claim stores the primary keys of the rows it takes on the batch row (``member_keys``, JSON
``[[id, bucket], ...]`` in batch order), so every reader goes from a batch to its rows by primary
key and the claim moves one index entry per row (``ix_status_group``), not two. The rows keep
their ``batch_id`` (written in place, unindexed) for people reading the table.
"""

from __future__ import annotations

import orjson

# A lateral table of the member keys of the batch row ``batches`` (or its alias), as ``k.id, k.bucket``.
_KEYS_TABLE = ("JSON_TABLE({batches}.member_keys, '$[*]'"
               " COLUMNS (id BIGINT UNSIGNED PATH '$[0]', bucket INT UNSIGNED PATH '$[1]')) AS k")


def member_keys_text(keys: list[str]) -> str:
    """The ``member_keys`` value of rows whose keys are ``"id,bucket"`` texts of integers."""
    return "[[" + "],[".join(keys) + "]]" if keys else "[]"


def keys_table(batches: str = "batches") -> str:
    """``JSON_TABLE`` over the member keys of ``batches``: join it, then ``buffer_rows`` on ``k.id, k.bucket``."""
    return _KEYS_TABLE.format(batches=batches)


def member_condition(batch_id: str, member_keys: str) -> tuple[str, tuple]:
    """A ``WHERE`` condition on ``buffer_rows`` (and its arguments) that selects the batch's member
    rows, by primary key from its keys."""
    pairs = orjson.loads(member_keys)
    if not pairs:
        return "FALSE", ()
    return f"(id, bucket) IN ({','.join(f'({int(i):d},{int(b):d})' for i, b in pairs)})", ()
