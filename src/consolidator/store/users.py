"""Per-function database users: each function connects as its own user, which may run only the
statements that function's code runs. Only the migration (the cluster's master user) runs DDL
on the schema, creates users and grants.

``GRANTS`` is the one declaration; :meth:`UserStore.ensure_users` makes the server match it:

- ``CREATE USER IF NOT EXISTS`` then ``ALTER USER ... IDENTIFIED BY`` the password of the
  function's secret (the secret is the source of truth, so a re-run after a rotation is a no-op);
- ``GRANT`` of each declared privilege, and ``REVOKE`` of any table or database privilege of
  that user on this database that the declaration does not name (read from ``mysql.tables_priv``
  and ``mysql.db``), so the user holds exactly what is declared after every run;
- idempotent, and the same SQL on MariaDB 10.6+ and MySQL 8 / Aurora MySQL 3.

Users are server-wide (``'name'@'%'``); grants are on this database's tables only. The
privileges are the least MySQL allows for each statement: partition maintenance
(``ALTER TABLE ... REORGANIZE PARTITION`` / ``DROP PARTITION``) needs ALTER and DROP on the
table itself, and ``LOCK TABLES`` is a database-level privilege (it also needs SELECT on each
table locked).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from consolidator.rules.errors import StoreError
from consolidator.store.connection import Connection

# role -> table -> privileges. A new table, or a new statement on a table, is added here in the
# same change (tests/integration/test_database_users.py runs each function's code as its user).
GRANTS: dict[str, dict[str, frozenset[str]]] = {
    "ingest": {
        "schema_migrations": frozenset({"SELECT"}),  # the runtime checks the schema version
        "buffer_rows": frozenset({"SELECT", "INSERT", "UPDATE"}),
        "partition_offsets": frozenset({"SELECT", "INSERT", "UPDATE"}),
        "applied_positions": frozenset({"SELECT", "INSERT"}),
    },
    "flush": {
        "schema_migrations": frozenset({"SELECT"}),  # the runtime checks the schema version
        "buffer_rows": frozenset({"SELECT", "UPDATE"}),
        "batches": frozenset({"SELECT", "INSERT", "UPDATE"}),
        "group_rate_limits": frozenset({"SELECT"}),
        "group_rate_state": frozenset({"SELECT", "INSERT", "UPDATE"}),
        "completion_trackers": frozenset({"SELECT", "INSERT", "UPDATE"}),
        "completion_items": frozenset({"SELECT", "INSERT", "UPDATE"}),
        "completion_keys": frozenset({"SELECT"}),  # the ack tokens' key
        "topic_epochs": frozenset({"SELECT"}),  # batch ids name their topics' epochs
    },
    "acks": {
        "schema_migrations": frozenset({"SELECT"}),  # the runtime checks the schema version
        "completion_trackers": frozenset({"SELECT", "UPDATE"}),
        "completion_items": frozenset({"SELECT"}),
        "batches": frozenset({"SELECT"}),
        "completion_keys": frozenset({"SELECT"}),
    },
    "cleanup": {
        "schema_migrations": frozenset({"SELECT"}),  # the runtime checks the schema version
        # partitions: information_schema, REORGANIZE PARTITION (ALTER), DROP PARTITION (ALTER, DROP)
        "buffer_rows": frozenset({"SELECT", "ALTER", "DROP"}),
        "applied_positions": frozenset({"SELECT", "ALTER", "DROP"}),
        "batches": frozenset({"SELECT", "DELETE"}),  # pruned once their rows' partitions are gone
        "group_rate_state": frozenset({"SELECT", "DELETE"}),  # states idle past every window
        "completion_trackers": frozenset({"SELECT", "DELETE"}),
        "completion_items": frozenset({"SELECT", "DELETE"}),
    },
}
# role -> privileges on the whole database (only those MySQL grants at that level alone)
DATABASE_GRANTS: dict[str, frozenset[str]] = {
    "cleanup": frozenset({"LOCK TABLES"}),  # drop_partition_if_sent locks the buffer and batches
}

_USER_NAME = re.compile(r"[A-Za-z0-9_]{1,32}")
# mysql.tables_priv.Table_priv values and mysql.db columns whose privilege name is not the
# obvious one
_TABLE_PRIV_NAMES = {"GRANT": "GRANT OPTION", "DELETE VERSIONING ROWS": "DELETE HISTORY"}
_DB_COLUMN_NAMES = {"GRANT": "GRANT OPTION", "CREATE TMP TABLE": "CREATE TEMPORARY TABLES"}


def check_roles(roles: Mapping[str, object]) -> None:
    """Raise a ValueError naming any role that is not declared in ``GRANTS``."""
    unknown = sorted(set(roles) - set(GRANTS))
    if unknown:
        raise ValueError(f"unknown database role(s) {', '.join(unknown)}: known are {', '.join(GRANTS)}")


class UserStore(Connection):
    def ensure_users(self, users: Mapping[str, tuple[str, str]]) -> list[str]:
        """Create or update the user of each role in ``users`` (role -> (user name, password))
        with exactly the declared privileges on this database. Returns the user names."""
        check_roles(users)
        for role, (user, password) in users.items():
            if not _USER_NAME.fullmatch(user):
                raise StoreError(f"database user name of role {role} must be 1-32 letters, digits or"
                                 f" underscores: {user!r}")
            if not password:
                raise StoreError(f"the secret of database role {role} has an empty password")
        with self.transaction() as cur:
            cur.execute("SELECT DATABASE() AS db")
            database = cur.fetchone()["db"]
            for role, (user, password) in users.items():
                _ensure_user(cur, database, user, password, GRANTS[role], DATABASE_GRANTS.get(role, frozenset()))
        return [user for user, _ in users.values()]


def _ensure_user(cur, database: str, user: str, password: str,
                 tables: Mapping[str, frozenset[str]], database_privileges: frozenset[str]) -> None:
    account = (user,)
    cur.execute("CREATE USER IF NOT EXISTS %s@'%%' IDENTIFIED BY %s", (user, password))
    cur.execute("ALTER USER %s@'%%' IDENTIFIED BY %s", (user, password))
    db = f"`{database}`"
    for table, privileges in tables.items():
        cur.execute(f"GRANT {', '.join(sorted(privileges))} ON {db}.`{table}` TO %s@'%%'", account)
    if database_privileges:
        cur.execute(f"GRANT {', '.join(sorted(database_privileges))} ON {db}.* TO %s@'%%'", account)

    cur.execute("SELECT Table_name AS t, Table_priv AS p FROM mysql.tables_priv"
                " WHERE User = %s AND Host = '%%' AND Db = %s", (user, database))
    for row in cur.fetchall():
        held = {_TABLE_PRIV_NAMES.get(p.upper(), p.upper()) for p in (row["p"] or "").split(",") if p}
        extra = held - tables.get(row["t"], frozenset())
        if extra:
            cur.execute(f"REVOKE {', '.join(sorted(extra))} ON {db}.`{row['t']}` FROM %s@'%%'", account)
    cur.execute("SELECT * FROM mysql.db WHERE User = %s AND Host = '%%' AND Db = %s", (user, database))
    for row in cur.fetchall():
        held = {_DB_COLUMN_NAMES.get(name, name) for name in
                (column[:-len("_priv")].replace("_", " ").upper() for column, value in row.items()
                 if column.endswith("_priv") and value == "Y")}
        extra = held - database_privileges
        if extra:
            cur.execute(f"REVOKE {', '.join(sorted(extra))} ON {db}.* FROM %s@'%%'", account)
