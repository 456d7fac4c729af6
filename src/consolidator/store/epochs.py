"""Topic epochs (schema 9): a batch id names the epoch of each of its members' topics.

A topic that is deleted and recreated starts its offsets at 0 again, so new records take the
positions of old ones. ``consolidator offsets reset`` forgets the topic's replay state and moves
its epoch in the same transaction; batches claimed afterwards get ids no batch of the old topic
has. A topic without a row is at epoch 0. Ids already assigned are stored and never recomputed
with a newer epoch (``batches.id_epochs`` holds the epochs an id was computed with).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping

import pymysql

from consolidator.rules.errors import DuplicateBatchId
from consolidator.rules.events import SourcePosition
from consolidator.store.connection import Connection

DUPLICATE_KEY = 1062


def id_epochs(positions: Iterable[SourcePosition], epochs: Mapping[str, int]) -> dict[str, int]:
    """The epochs of the positions' topics that are not 0 (what a batch id of them names)."""
    return {topic: epochs[topic] for topic in {p.topic for p in positions} if epochs.get(topic, 0)}


@contextlib.contextmanager
def duplicate_id_refused(batch_id: str, group_key: str) -> Iterator[None]:
    """Turn the duplicate-key error of inserting a batch row into :class:`DuplicateBatchId`."""
    try:
        yield
    except pymysql.err.IntegrityError as exc:
        if exc.args and exc.args[0] == DUPLICATE_KEY:
            raise DuplicateBatchId(batch_id, group_key) from exc
        raise


def move_epoch(cur, topic: str, now_ms: int) -> int:
    """Raise ``topic``'s epoch by one (inside the caller's transaction); returns the new epoch."""
    cur.execute(
        "INSERT INTO topic_epochs (src_topic, epoch, moved_at_ms) VALUES (%s, 1, %s)"
        " ON DUPLICATE KEY UPDATE epoch = epoch + 1, moved_at_ms = VALUES(moved_at_ms)",
        (topic, now_ms),
    )
    cur.execute("SELECT epoch FROM topic_epochs WHERE src_topic = %s", (topic,))
    return int(cur.fetchone()["epoch"])


class EpochStore(Connection):
    def topic_epochs(self) -> dict[str, int]:
        """Every topic's epoch that is not 0 (a few rows: one per topic ever reset)."""
        with self.transaction() as cur:
            cur.execute("SELECT src_topic, epoch FROM topic_epochs WHERE epoch > 0 ORDER BY src_topic")
            return {r["src_topic"]: int(r["epoch"]) for r in cur.fetchall()}
