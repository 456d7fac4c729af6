"""The project's own exceptions. Services never see driver (pymysql, redis, boto3) types."""


class ConsolidatorError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigurationError(ConsolidatorError):
    """Settings are missing or malformed; the message names each variable."""


class DatabaseNotOwned(ConfigurationError):
    """A command was asked to create, drop or migrate into a database it may not touch: a system
    schema of the server, or a database it did not create itself (no ownership marker of its own,
    see ``consolidator.store.databases``). Nothing was changed."""


class StoreError(ConsolidatorError):
    """A statement failed (bad data, constraint, deadlock). Other records may still succeed."""


class StoreConflict(StoreError):
    """The server rolled the transaction back to break a deadlock or a lock wait; running the
    same transaction again may well succeed."""


class StoreLockWait(StoreConflict):
    """The server gave up waiting for a lock another transaction holds (its lock wait timeout)
    and rolled back: running the same transaction again at once would wait as long."""


class BatchRowsGone(StoreError):
    """A DEAD batch cannot be revived: rows of it were dropped with their partition (the cleanup
    drops rows of DEAD batches). Its dead-letter entry still holds the whole batch."""


class DuplicateBatchId(StoreError):
    """A claim computed a batch id that a stored batch already has: nothing was claimed. Since
    schema 9 ids name their topics' epochs, so this means a topic was recreated and its offsets
    reset without ``consolidator offsets reset`` (or during a flush tick); see docs/semantics.md."""

    def __init__(self, batch_id: str, group_key: str):
        super().__init__(f"batch id {batch_id} of group {group_key!r} is already taken by a stored batch;"
                         " the claim is refused (recreated topic? run `consolidator offsets reset TOPIC`)")
        self.batch_id, self.group_key = batch_id, group_key


class StoreUnavailable(ConsolidatorError):
    """The database cannot be reached; nothing was written by the failing call.
    Not a :class:`StoreError`: retrying other records against a missing server is pointless."""


class StoreRefused(ConsolidatorError):
    """The database refused this client: credentials rejected even after re-reading the secret,
    or a TLS certificate that does not verify. Not an outage and not retried record by record:
    it propagates, so the invocation fails, is counted as an error and alarms."""


class SchemaOutdated(StoreRefused):
    """The database's schema is older than this code needs (``consolidator db migrate`` brings any
    older schema to the current one). Raised before anything is read or written."""


class LedgerNotDrained(StoreRefused):
    """``db migrate`` would retire the pre-schema-4 per-record ledger while it may still decide a
    record: a partition's ledger has a gap (a record Kafka may still re-deliver) at or below its
    ``ledger_high_water``. Nothing was written; the message names each partition and the check
    that allows ``--ledger-drained`` (docs/guide/operations.md)."""


class DeliveryError(ConsolidatorError):
    """A sink or dead-letter destination did not confirm a write."""


class LockUnavailable(ConsolidatorError):
    """The lock backend (Redis) cannot be reached."""
