"""The buffer on MySQL 8.0 / Aurora MySQL 3 / MariaDB 10.11: one store object composed of one
part per concern. Every SQL statement lives in this package.

The parts, and the methods each one owns (every method is defined in exactly one part, none
overrides another; ``tests/unit/test_store_composition.py`` keeps this list true). All share one
:class:`~consolidator.store.connection.Connection` (``transaction``, ``close``, ``ping``):

- ``SchemaStore`` (schema.py): migrate, schema_version
- ``BufferStore`` (buffer.py): ingest, ingest_pipelined, ingest_redriven, pending_group_stats,
  row_counts
- ``OffsetStore`` (offsets.py): partition_offsets, replay_marks, replay_state_rows, reset_offsets
- ``EpochStore`` (epochs.py): topic_epochs
- ``BatchStore`` (batches.py): batch_counts, batches_in_state, begin_publish, claim,
  claim_unbuilt, claimed_batch_ids, load_batch, mark_dead, mark_sent, mark_sent_many,
  record_failure, revive_dead_batch
- ``BatchViews`` (batch_views.py): batch_view, batch_views
- ``EventFinder`` (batch_views.py): rows_at_position, rows_of_item
- ``PartitionStore`` (partitions.py): add_partitions_through, drop_partition_if_sent, partitions,
  prune_batches, unsent_rows_in_partition
- ``LimitStore`` (limits.py): clear_limit, limits, prune_rate_states, rate_states, set_limit,
  throttled_groups
- ``ExpiryStore`` (expiry.py): claim_expired, load_expiry, mark_expired
- ``CompletionStore`` (completion.py): ack_key, acked_members, apply_acks, batch_state,
  delete_trackers, incomplete_summary, incomplete_trackers, lease_completions,
  mark_completions_published, seal, tracker
- ``UserStore`` (users.py): ensure_users
"""

from __future__ import annotations

from consolidator.store.batch_views import BatchViews, EventFinder
from consolidator.store.batches import BatchStore, ClaimedBatch
from consolidator.store.buffer import BufferStore, IngestCounts
from consolidator.store.completion import CompletionStore
from consolidator.store.connection import ConnectionParams
from consolidator.store.epochs import EpochStore
from consolidator.store.expiry import ExpiryBatch, ExpiryStore
from consolidator.store.limits import LimitStore
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


class MySQLStore(SchemaStore, BufferStore, OffsetStore, EpochStore, BatchStore, BatchViews, EventFinder, PartitionStore,
                 LimitStore, ExpiryStore, CompletionStore, UserStore):
    """One connection, used by one thread at a time. Reconnects after the server went away.
    Which part owns which method: the module's docstring."""
