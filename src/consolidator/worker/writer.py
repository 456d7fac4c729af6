"""The writer: a thread that takes a job from the ledger, hands its records to the ingest service
(the same one the Lambda function runs: decode, poison to the dead letter, upsert under the
high-water marks) and reports per partition what became durable.

It is the only user of its store's connection. It never touches the Kafka client, so a slow or
unreachable database holds this thread only; the poll loop keeps polling and pauses partitions.
"""

from __future__ import annotations

import logging
import threading
import time

from consolidator.rules.errors import ConsolidatorError
from consolidator.rules.events import KafkaRecord
from consolidator.services.ingest import IngestService
from consolidator.services.metrics import MetricsRecorder
from consolidator.worker.ledger import Ledger, WriteJob, WriteOutcome
from consolidator.worker.records import item_offset

log = logging.getLogger(__name__)
IDLE_WAIT_S = 0.5  # how long the writer waits for work before looking at its stop flag again


def write(service: IngestService, job: WriteJob) -> WriteOutcome:
    """Ingest the job's records; per partition, the first offset not made durable. A failure of
    the service itself (the database refused the credentials, an outdated schema, a bug) fails
    every partition of the job from its first record: all of it is retried."""
    records: list[KafkaRecord] = []
    rejected = []
    for items in job.items.values():
        for item in items:
            (records if type(item) is KafkaRecord else rejected).append(item)
    try:
        outcome = service.ingest(records, rejected)
    except ConsolidatorError as error:
        log.error("write failed; its records will be retried", extra={"error": str(error), "records": job.size})
        return WriteOutcome({p: item_offset(items[0]) for p, items in job.items.items()})
    failed: dict[tuple[str, int], int] = {}
    for position in outcome.failed:
        key = (position.topic, position.partition)
        failed[key] = min(failed.get(key, position.offset), position.offset)
    return WriteOutcome(failed)


class Writer:
    """Runs :func:`write` on the ledger's jobs in its own thread until stopped."""

    def __init__(self, ledger: Ledger, service: IngestService, metrics: MetricsRecorder) -> None:
        self.ledger = ledger
        self.service = service
        self.metrics = metrics
        self.busy_since: float | None = None  # monotonic start of the write in flight
        self.last_ok: bool | None = None  # whether the last write made every record durable
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="consolidator-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """No new job after the one in flight (the ledger is closed by the poll loop's shutdown)."""
        self._stop.set()

    def join(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            job = self.ledger.next_job(IDLE_WAIT_S)
            if job is None:
                continue
            started = time.monotonic()
            self.busy_since = started
            try:
                outcome = write(self.service, job)
            except Exception:
                # a bug, not an outage: logged with its traceback, counted, and the job retried
                log.exception("write raised; its records will be retried")
                outcome = WriteOutcome({p: item_offset(items[0]) for p, items in job.items.items()})
            finally:
                self.busy_since = None
            failed = self.ledger.complete(job, outcome)
            self.last_ok = not failed
            self.metrics.add_metric(name="WorkerWriteSeconds", unit="Seconds", value=time.monotonic() - started)
            if failed:
                self.metrics.add_metric(name="WorkerWriteFailures", unit="Count", value=1)
                log.warning("partitions paused until their write succeeds",
                            extra={"partitions": [{"topic": t, "partition": p} for t, p in failed]})
        self.service.store.close()

