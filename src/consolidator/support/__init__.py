"""Small helpers every runtime uses, with no rules of their own: logging (``function_logging``,
``kafkalog``), masking (``redact``), JSON lines files (``jsonlines``), secrets (``aws_secrets``) and
the garbage-collector pause (``collector``)."""
