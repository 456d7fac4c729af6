"""Spark jobs on PySpark: the streaming aggregator and the policy replay.

Both reuse ``policy.py``, ``batch.py`` and ``events.decode`` unchanged; :mod:`.buffer` holds the
MySQL buffer's ingest and claim rules in memory. Importing this package does not import pyspark.
"""
