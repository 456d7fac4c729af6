"""Spark's Python worker daemon with the workers' imports done once, before it forks.

Spark forks a Python worker from this daemon for each task that needs one; a streaming query
gets fresh workers every micro-batch, and each imported pandas, pyarrow and this package again
(about a second per worker on a busy machine, several when no bytecode cache can be written).
Imported here, they are inherited by every forked worker. Each forked worker also calls
``importlib.invalidate_caches()``, which re-reads the directory of every zip archive on the
path (``pyspark.zip`` holds thousands of files; over a second per worker on a busy machine): the
daemon forgets its zip importers once its imports are done, so there is nothing to re-read.

Selected with ``spark.python.daemon.module=consolidator.spark.daemon`` (set by
:func:`consolidator.spark.session.build_session` for local masters); behaviour is Spark's own
``pyspark.daemon``.
"""

import sys
import zipimport

import pandas  # noqa: F401
import pyarrow  # noqa: F401
import pyspark.daemon
import pyspark.sql.pandas.serializers
import pyspark.sql.streaming.proto.StateMessage_pb2
import pyspark.sql.streaming.stateful_processor_util
import pyspark.worker

import consolidator.spark.streaming
import consolidator.spark.transforms  # noqa: F401


def forget_zip_importers() -> None:
    """Drop cached zip importers (a later import from a zip makes a new one, reading it once)."""
    for path, finder in list(sys.path_importer_cache.items()):
        if isinstance(finder, zipimport.zipimporter):
            del sys.path_importer_cache[path]


if __name__ == "__main__":
    forget_zip_importers()
    pyspark.daemon.manager()
