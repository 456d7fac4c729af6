"""Building a SparkSession with what both jobs need (RocksDB state store, Arrow), sized to the
cores it is given, and a one-line progress log for streaming queries."""

from __future__ import annotations

import logging
import os
import re
import sys

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"

DEFAULTS = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
}

LOCAL_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.python.worker.reuse": "true",
    "spark.sql.adaptive.enabled": "false",
    # workers fork from a daemon that imported pandas, pyarrow and consolidator (spark/daemon.py)
    "spark.python.daemon.module": "consolidator.spark.daemon",
}

#: The streaming job's Arrow batches: 50,000 records, not Spark's 10,000, so fewer and larger batches
#: go through the packing step and ``transformWithStateInPandas`` (about 6% more events/s in
#: bench-stream, docs/guide/spark.md "Throughput"). ``spark.sql.execution.arrow.maxBytesPerBatch``
#: still bounds a batch's bytes.
STREAM_SETTINGS = {"spark.sql.execution.arrow.maxRecordsPerBatch": "50000"}

log = logging.getLogger("consolidator.spark")


def local_cores(master: str) -> int | None:
    """Cores of a ``local``, ``local[N]``, ``local[*]`` or ``local[N,F]`` master; None otherwise."""
    if master == "local":
        return 1
    match = re.fullmatch(r"local\[(\*|\d+)(?:,\d+)?\]", master)
    if match is None:
        return None
    return (os.cpu_count() or 1) if match.group(1) == "*" else int(match.group(1))


def session_settings(master: str | None, extra: dict[str, str] | None = None,
                     progress: bool = False, stream: bool = False) -> dict[str, str]:
    """The configuration :func:`build_session` sets (``extra`` wins); ``stream``: the streaming
    job's session (:data:`STREAM_SETTINGS`)."""
    settings = dict(DEFAULTS)
    if stream:
        settings.update(STREAM_SETTINGS)
    cores = local_cores(master) if master else None
    if cores is not None:
        settings.update(LOCAL_DEFAULTS)
        settings.update({SHUFFLE_PARTITIONS: str(cores), "spark.default.parallelism": str(cores)})
    settings["spark.ui.showConsoleProgress"] = "true" if progress else "false"
    settings.update(extra or {})
    return settings


def build_session(app_name: str, master: str | None = None, extra: dict[str, str] | None = None,
                  progress: bool = False, stream: bool = False):
    """Get or create the session.

    Shuffle partitions (the streaming job's state partitions, the replay's groups) follow the
    cores given: ``local[N]`` -> N; on a cluster (``master`` None, e.g. spark-submit on EMR),
    unless ``spark.sql.shuffle.partitions`` was set (``extra`` or ``--conf``), the application's
    default parallelism when the session starts. A streaming checkpoint keeps the number it was
    started with. ``progress`` shows Spark's console progress bar (long replays)."""
    from pyspark.sql import SparkSession

    if master and master.startswith("local"):
        # local workers must run this interpreter (the one that has consolidator installed)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    settings = session_settings(master, extra, progress, stream)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    if SHUFFLE_PARTITIONS not in settings and not session.sparkContext.getConf().contains(SHUFFLE_PARTITIONS):
        session.conf.set(SHUFFLE_PARTITIONS, str(session.sparkContext.defaultParallelism))
    return session


def log_progress(spark) -> None:
    """Log one line per micro-batch of every streaming query of ``spark`` (logger
    ``consolidator.spark``, INFO): input rows, rows/s, duration, state rows."""
    from pyspark.sql.streaming import StreamingQueryListener

    class ProgressLine(StreamingQueryListener):
        def onQueryStarted(self, event) -> None:
            log.info("query %s started (id %s)", event.name, event.id)

        def onQueryProgress(self, event) -> None:
            p = event.progress
            state_rows = sum(op.numRowsTotal for op in p.stateOperators)
            log.info("query %s batch %d: %d rows in, %.0f rows/s, %d ms, %d state rows", p.name, p.batchId,
                     p.numInputRows, p.processedRowsPerSecond or 0.0, p.batchDuration, state_rows)

        def onQueryIdle(self, event) -> None:
            pass  # an idle query has nothing to report; progress lines stop until input arrives

        def onQueryTerminated(self, event) -> None:
            log.info("query %s terminated%s", event.id, f": {event.exception}" if event.exception else "")

    spark.streams.addListener(ProgressLine())
