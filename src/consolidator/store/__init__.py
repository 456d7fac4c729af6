"""Buffer storage. ``open_store`` builds the MySQL store from settings (URL or Secrets Manager)."""

from __future__ import annotations

import json

from consolidator.store.mysql import ConnectionParams, MySQLStore


def open_store(database_url: str | None, database_secret_arn: str | None = None) -> MySQLStore:
    """A store for the configured database; reads the secret once when only an ARN is given."""
    if database_url:
        return MySQLStore(ConnectionParams.from_url(database_url))
    if not database_secret_arn:
        raise ValueError("a database URL or secret ARN is required")
    from consolidator.aws_secrets import secret_string

    return MySQLStore(ConnectionParams.from_secret(json.loads(secret_string(database_secret_arn))))
