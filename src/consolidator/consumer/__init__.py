"""What downstream code (the consumers of the batches) imports: :mod:`~consolidator.consumer.acks`
(``AckClient``, acknowledging batch members for completion tracking) and
:mod:`~consolidator.consumer.dedupe` (``RedisDedupe``, processing each batch once). Nothing of
the pipeline imports this package."""
