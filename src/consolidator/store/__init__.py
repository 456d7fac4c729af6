"""Buffer storage. ``open_store`` builds the MySQL store from settings (URL or Secrets Manager)."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from consolidator.rules.errors import StoreRefused, StoreUnavailable
from consolidator.store.connection import plaintext_refusal
from consolidator.store.mysql import ConnectionParams, MySQLStore
from consolidator.store.schema import SCHEMA_VERSION


def _secret_reader(database_secret_arn: str):
    """Reads the RDS-format secret; called at start and again whenever the database rejects the
    credentials (a rotation), so a warm container picks up the new password."""
    from botocore.exceptions import BotoCoreError, ClientError

    from consolidator.support.aws_secrets import secret_string

    def read() -> ConnectionParams:
        try:
            text = secret_string(database_secret_arn)
        except (BotoCoreError, ClientError) as exc:
            raise StoreUnavailable(f"database secret could not be read: {exc}") from exc
        try:
            return ConnectionParams.from_secret(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreRefused(f"database secret is not in RDS format (host, port, username, password,"
                               f" dbname): {type(exc).__name__} {exc}") from None

    return read


def read_database_secret(database_secret_arn: str) -> ConnectionParams:
    """The connection parameters of an RDS-format secret, read now (errors as ``_secret_reader``)."""
    return _secret_reader(database_secret_arn)()


def open_store(database_url: str | None, database_secret_arn: str | None = None, *,
               migrating: bool = False, tls_required: bool = False) -> MySQLStore:
    """A store for the configured database. It requires the current schema
    (:data:`~consolidator.store.schema.SCHEMA_VERSION`): every new connection checks it first and
    raises :class:`~consolidator.rules.errors.SchemaOutdated` on an older one, unless ``migrating``
    (``db migrate`` and the migrate function, which bring it there).

    - a URL with a user name: everything from the URL (the secret, if any, is not used);
    - a secret ARN: everything from the secret, TLS verified against the RDS CA bundle;
    - both, the URL without a user name: host, port, database and TLS options from the URL,
      user and password from the secret (e.g. a local or proxied endpoint).
    The secret is re-read when the database rejects its credentials (see ``Connection._open``).
    ``tls_required``: a URL that would connect in plaintext to another machine is refused
    (:class:`StoreRefused`, :func:`~consolidator.store.connection.plaintext_refusal`) before any
    secret is read."""
    required = None if migrating else SCHEMA_VERSION
    location = ConnectionParams.from_url(database_url) if database_url else None
    if tls_required and location is not None and (refusal := plaintext_refusal(location)):
        raise StoreRefused(f"database refused: {refusal}")
    if location is not None and (not database_secret_arn or urlsplit(database_url).username):
        return MySQLStore(location, required_schema=required)
    if not database_secret_arn:
        raise ValueError("a database URL or secret ARN is required")
    read = _secret_reader(database_secret_arn)
    if location is None:
        return MySQLStore(read(), credentials=read, required_schema=required)

    def credentials() -> ConnectionParams:
        secret = read()
        return ConnectionParams(location.host, location.port, secret.user, secret.password,
                                location.database, location.ssl_ca, location.ssl)

    return MySQLStore(credentials(), credentials=credentials, required_schema=required)
