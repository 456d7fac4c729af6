"""Entry-point file for ``spark-submit`` / EMR Serverless (``make emr-archive`` copies it to
``build/emr/entry.py``; upload it as ``code/entry.py``): ``spark-submit entry.py stream
--topic ... | replay ...``. The package itself comes from the environment archive
(``spark.archives=...#environment``, run by ``./environment/bin/python``)."""

if __name__ == "__main__":
    from consolidator.cli.spark.commands import main

    main()
