"""``spark-submit`` entry: ``python -m consolidator.spark stream ...`` or ``replay ...``."""

from consolidator.spark.cli import main

main()
