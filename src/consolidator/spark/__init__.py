"""The Spark engine: the streaming aggregator and the policy replay on PySpark, with the
vectorised state and simulations their Python workers run.

Both call the rules (:mod:`consolidator.rules`) unchanged: ``policy`` decides, ``batch`` builds the
message, ``events.decode`` validates; the reference model they are proven equal to is
:mod:`consolidator.rules.buffer` and :mod:`consolidator.rules.simulation`. The commands that run
them are in :mod:`consolidator.cli.spark`. Importing this package does not import pyspark.
"""
