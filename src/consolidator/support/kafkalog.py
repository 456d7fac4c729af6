"""librdkafka's own log lines (connection failures, broker errors) through Python logging.

Without this, librdkafka writes raw ``%3|1764...|FAIL|rdkafka#producer-1| ...`` lines on stderr,
outside every log format and filter. :func:`client_logging` is merged into every Kafka client's
configuration: the client logs to :data:`LOGGER` and only at warning and above (librdkafka's
syslog level 4), so a Lambda's JSON logs and the CLI's stderr carry them like any other line.
The client hands its log lines over when it is polled (``poll``, ``flush``, ``consume``).
"""

from __future__ import annotations

import logging

LOGGER = logging.getLogger("consolidator.kafka.client")
SYSLOG_WARNING = 4  # librdkafka's log_level: 0 emergency ... 4 warning ... 7 debug


def client_logging() -> dict:
    """The ``logger`` and ``log_level`` settings of a confluent-kafka client (merge them first,
    so an explicit setting of the caller still wins)."""
    return {"logger": LOGGER, "log_level": SYSLOG_WARNING}
