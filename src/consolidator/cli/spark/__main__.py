"""``spark-submit`` entry: ``python -m consolidator.cli.spark stream ...`` or ``replay ...``."""

from consolidator.cli.spark.commands import main

main()
