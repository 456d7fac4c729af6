"""Executor-side delivery of the streaming job's output: each partition of a micro-batch's
output is published from the executor holding it (batches to the sink, dead letters to the
dead-letter destination, sealed first for completion tracking), and a micro-batch returns only
when every write is confirmed. Nothing goes through the driver.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from consolidator.rules.errors import DeliveryError

BATCH = "batch"  # the ``kind`` of a batch row of the job's output (the others are dead letters)

_DESTINATIONS: dict[tuple[str, object], object] = {}  # per Python worker: producers outlive a task


def _open(kind: str, url, opener: Callable):
    """One sink / dead-letter client per URL and worker process (Kafka producers are costly)."""
    client = _DESTINATIONS.get((kind, url))
    if client is None:
        client = _DESTINATIONS[(kind, url)] = opener(url)
    return client


def deliver_partition(rows: Iterable, *, sink_url: str, dead_letter_url: str, epoch_id: int,
                      sink_opener: Callable | None = None, chunk: int = 500,
                      tracking_database_url: str | None = None,
                      tracking_database_secret_arn: str | None = None) -> None:
    """Publish one partition of a micro-batch's output from the executor holding it: batches to
    the sink, dead letters to the dead-letter destination, ``chunk`` at a time. Raises
    :class:`DeliveryError` unless every write is confirmed, which fails the task (Spark retries
    it, then fails the micro-batch; the same rows, with the same batch ids, go out again).
    With ``tracking_database_url`` and/or ``tracking_database_secret_arn`` every batch is sealed
    in that database (completion tracking, the Lambda path's trackers; the two resolve as in
    :func:`consolidator.store.open_store`: the secret gives the credentials, read by the executor
    from Secrets Manager, so no password travels in the job's arguments) before it is published,
    so an ack never finds its batch unknown."""
    from consolidator.sinks import OutgoingBatch, sink_from_url
    from consolidator.sinks.deadletter import dead_letter_from_url

    batches: list = []
    dead: list[dict] = []

    def send_batches() -> None:
        if tracking_database_url or tracking_database_secret_arn:
            _seal(tracking_database_url, tracking_database_secret_arn, batches, epoch_id)
        failures = _open("sink", sink_url, sink_opener or sink_from_url).publish(batches)
        if failures:
            raise DeliveryError(f"micro-batch {epoch_id}: {len(failures)} of {len(batches)} batches not "
                                f"confirmed: {list(failures.values())[:3]}")
        batches.clear()

    def send_dead() -> None:
        failed = _open("dead_letter", dead_letter_url, dead_letter_from_url).send(dead)
        if failed:
            raise DeliveryError(f"micro-batch {epoch_id}: {len(failed)} of {len(dead)} dead-letter entries "
                                "not confirmed")
        dead.clear()

    for row in rows:
        if row["kind"] == BATCH:
            batches.append(OutgoingBatch(row["batch_id"], row["group_key"], row["body"].encode()))
            if len(batches) >= chunk:
                send_batches()
        else:
            dead.append(json.loads(row["body"]))
            if len(dead) >= chunk:
                send_dead()
    if dead:
        send_dead()
    if batches:
        send_batches()


def _seal(database_url: str | None, secret_arn: str | None, batches: list, epoch_id: int) -> None:
    from consolidator.rules.clock import SystemClock
    from consolidator.rules.errors import StoreError, StoreRefused, StoreUnavailable
    from consolidator.store import open_store
    from consolidator.store.completion import SealedBatch

    try:
        store = _open("trackers", (database_url, secret_arn), lambda target: open_store(*target, tls_required=True))
        store.seal([SealedBatch.of_message(json.loads(b.body)) for b in batches], SystemClock().now_ms())
    except (StoreError, StoreUnavailable, StoreRefused) as error:
        raise DeliveryError(f"micro-batch {epoch_id}: batches not sealed for completion tracking: {error}") from error


@dataclass
class BatchWriter:
    """``foreachBatch`` sink: batches to ``sink_url`` (any :func:`consolidator.sinks.sink_from_url`
    URL), dead letters to ``dead_letter_url`` (:func:`consolidator.sinks.deadletter.dead_letter_from_url`),
    each partition from its executor (:func:`deliver_partition`): nothing goes through the driver.
    Returns only when every partition confirmed every write; otherwise the micro-batch fails, is
    not committed and runs again on restart (at least once; consumers dedupe on ``batch_id``).
    ``sink_opener`` (URL -> sink) must be picklable; None = :func:`consolidator.sinks.sink_from_url`."""

    sink_url: str
    dead_letter_url: str
    sink_opener: Callable | None = None
    # completion tracking: seal each batch there first (see deliver_partition)
    tracking_database_url: str | None = field(default=None, repr=False)
    tracking_database_secret_arn: str | None = None

    def __call__(self, df, epoch_id: int) -> None:
        df.foreachPartition(functools.partial(
            deliver_partition, sink_url=self.sink_url, dead_letter_url=self.dead_letter_url,
            epoch_id=epoch_id, sink_opener=self.sink_opener, tracking_database_url=self.tracking_database_url,
            tracking_database_secret_arn=self.tracking_database_secret_arn))

    def close(self) -> None:
        """Release the destinations this process opened (the driver's, in local runs)."""
        close_destinations()


def close_destinations() -> None:
    while _DESTINATIONS:
        _, client = _DESTINATIONS.popitem()
        close = getattr(client, "close", None)
        if close is not None:
            close()
