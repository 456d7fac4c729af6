"""``consolidator worker``: the long-running consumer service (docs/guide/worker.md). It runs the same
ingest and flush services as the Lambda functions, with Kafka's partition assignment as the
ownership of work:

- ``consumer.py``: the poll loop (the only user of the Kafka client: fetch, pause, commit,
  rebalance callbacks);
- ``ledger.py``: what the worker holds of each partition, and which offsets are durable;
- ``writer.py``: the thread that writes records through the ingest service;
- ``flusher.py``: the flush loop (the flush service's tick under the Redis lock);
- ``health.py``, ``metrics.py``: ``/healthz``, ``/readyz``, ``/metrics`` (Prometheus);
- ``runtime.py``: the parts built from the settings, started and stopped together;
- ``signals.py``: SIGTERM and SIGINT.
"""
