"""Entry-point file for ``spark-submit`` / EMR Serverless (upload as ``code/entry.py``):
``spark-submit entry.py stream --topic ... | replay ...``. The package itself comes from the
venv archive (``spark.archives``)."""

if __name__ == "__main__":
    from consolidator.spark.cli import main

    main()
