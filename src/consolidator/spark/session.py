"""Building a SparkSession with what both jobs need (RocksDB state store, Arrow)."""

from __future__ import annotations

import os
import sys

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

DEFAULTS = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
}

LOCAL_DEFAULTS = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.python.worker.reuse": "true",
    "spark.sql.adaptive.enabled": "false",
}


def build_session(app_name: str, master: str | None = None, extra: dict[str, str] | None = None):
    """Get or create the session. With a ``local[...]`` master, small-machine defaults apply;
    on a cluster (``master`` None, e.g. spark-submit on EMR) only :data:`DEFAULTS` are set."""
    from pyspark.sql import SparkSession

    if master and master.startswith("local"):
        # local workers must run this interpreter (the one that has consolidator installed)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    settings = dict(DEFAULTS)
    if master:
        builder = builder.master(master)
        if master.startswith("local"):
            settings.update(LOCAL_DEFAULTS)
    settings.update(extra or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
