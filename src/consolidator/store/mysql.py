"""The buffer on MySQL 8.0 / Aurora MySQL 3 / MariaDB 10.11: one store object composed of one
part per concern (schema, buffer, offsets, batches, partitions, limits, completion). Every SQL statement lives in this package."""

from __future__ import annotations

from consolidator.store.batch_views import BatchViews
from consolidator.store.batches import BatchStore, ClaimedBatch
from consolidator.store.buffer import BufferStore, IngestCounts
from consolidator.store.completion import CompletionStore
from consolidator.store.connection import ConnectionParams
from consolidator.store.epochs import EpochStore
from consolidator.store.limits import ExpiryBatch, LimitStore
from consolidator.store.offsets import Mark, OffsetStore, PartitionOffset
from consolidator.store.partitions import (
    BUFFER_TABLES,
    MAXVALUE_PARTITION,
    PartitionInfo,
    PartitionStore,
)
from consolidator.store.rate import Throttled
from consolidator.store.schema import SchemaStore
from consolidator.store.users import UserStore

__all__ = [
    "BUFFER_TABLES", "MAXVALUE_PARTITION", "ClaimedBatch", "ConnectionParams", "ExpiryBatch", "IngestCounts",
    "Mark", "MySQLStore", "PartitionInfo", "PartitionOffset", "Throttled",
]


class MySQLStore(SchemaStore, BufferStore, OffsetStore, EpochStore, BatchStore, BatchViews, PartitionStore,
                 LimitStore, CompletionStore, UserStore):
    """One connection, used by one thread at a time. Reconnects after the server went away."""
