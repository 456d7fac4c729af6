"""Deploy-time migration use case: the schema, then the per-function database users.

Guarantees:
- schema migrations not applied yet are applied in order (``SchemaStore.migrate``);
- then each role named in ``user_secrets`` gets its user, with the password of its secret and
  exactly the privileges ``consolidator.store.users.GRANTS`` declares (``UserStore.ensure_users``);
- idempotent: a second run applies nothing and leaves users and grants as they are;
- a password goes from its secret to the server only: it is in no report, log line or error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

from consolidator.rules.clock import Clock
from consolidator.store.mysql import ConnectionParams, MySQLStore
from consolidator.store.users import check_roles


@dataclass
class MigrationReport:
    applied: list[int]
    users: dict[str, str] = field(default_factory=dict)  # role -> user name

    def as_dict(self) -> dict:
        return asdict(self)


def migrate_database(store: MySQLStore, clock: Clock, user_secrets: Mapping[str, str],
                     read_secret: Callable[[str], ConnectionParams]) -> MigrationReport:
    """Migrate the schema, then create or update the user of each role (role -> secret ARN)."""
    check_roles(user_secrets)
    applied = store.migrate(clock.now_ms())
    credentials = {role: read_secret(arn) for role, arn in user_secrets.items()}
    store.ensure_users({role: (c.user, c.password) for role, c in credentials.items()})
    return MigrationReport(applied, {role: c.user for role, c in credentials.items()})


def build_migration(settings) -> Callable[[Clock], MigrationReport]:
    """Wire the migration from :class:`~consolidator.settings.MigrateSettings`: the store is the
    master user's (URL or ``DATABASE_SECRET_ARN``); each role's secret is read when it runs."""
    from consolidator.store import open_store, read_database_secret

    check_roles(settings.database_users)
    store = open_store(settings.database_url, settings.database_secret_arn, migrating=True)
    return lambda clock: migrate_database(store, clock, settings.database_users, read_database_secret)
