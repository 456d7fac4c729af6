"""The cyclic garbage collector paused over a unit of work that makes many acyclic objects.

A flush claim reads up to ``max_batch_size`` rows and parses each row's stored JSON into dicts
and lists (a generic shape's ~1 KB event is a dozen containers): trees, never cycles, freed by
reference counting as soon as their batch is delivered. Every collection that runs meanwhile
traverses them all again; on bench-flush's generic drain that was about a third of the
flusher's CPU per row (the default shape: about a fifth). An ingest call is the same: its
records and their parsed events, up to the MSK batch size (pausing it took ingest from 11,900
to 19,500 generic records/s, and from 30,500 to 38,700 orders/s, best of three, alternated), and
in the worker the records its poll thread holds meanwhile too; and so is a Spark replay's chunk
of parsed events (spark/replay.py)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The collector off inside the block and back on after it, whatever the block raises.
    Reference counting still frees what is not in a cycle; a cycle made inside waits for the
    first collection after the block (due at once: the allocation count is past its threshold
    by then). A collector already off (a caller's choice) is left off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
