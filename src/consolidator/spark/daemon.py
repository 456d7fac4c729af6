"""Spark's Python worker daemon with the workers' imports done once, before it forks.

Spark forks a Python worker from this daemon for each task that needs one; a streaming query
gets fresh workers every micro-batch, and each imported pandas, pyarrow and this package again
(about a second per worker on a busy machine, several when no bytecode cache can be written).
Imported here, they are inherited by every forked worker. Selected with
``spark.python.daemon.module=consolidator.spark.daemon`` (set by
:func:`consolidator.spark.session.build_session` for local masters); behaviour is Spark's own
``pyspark.daemon``.
"""

import pandas  # noqa: F401
import pyarrow  # noqa: F401
import pyspark.daemon
import pyspark.sql.pandas.serializers
import pyspark.sql.streaming.stateful_processor_util
import pyspark.worker

import consolidator.spark.streaming
import consolidator.spark.transforms  # noqa: F401

if __name__ == "__main__":
    pyspark.daemon.manager()
