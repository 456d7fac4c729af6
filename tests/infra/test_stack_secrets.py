"""Secrets in the synthesized stack: only the migration reads the cluster's master secret; every
other function reads its own database user's secret, and nothing else of the database's."""

from __future__ import annotations

import json

from test_stack import _function, _role_actions


def test_only_the_migration_reads_the_master_secret_and_each_function_only_its_own(env):
    stack = env.stack
    master = env.logical_id(stack.database.secret)
    functions = {"ingest": stack.ingest, "flush": stack.flush, "cleanup": stack.cleanup,
                 **({"acks": stack.acks} if stack.completion else {})}
    assert sorted(stack.database.users) == sorted(functions)
    user_secrets = {role: json.dumps(stack.resolve(secret.secret_arn)) for role, secret in stack.database.users.items()}
    migrate = _role_actions(env, stack.migrate)["secretsmanager:GetSecretValue"]
    assert any(master in r for r in migrate)
    assert all(any(arn in r for r in migrate) for arn in user_secrets.values())
    variables = _function(env, stack.migrate)["Environment"]["Variables"]
    assert master in json.dumps(variables["CONSOLIDATOR_DATABASE_SECRET_ARN"])
    assert all(arn.strip('{}') in json.dumps(variables["CONSOLIDATOR_DATABASE_USERS"]) for arn in user_secrets.values())
    for role, function in functions.items():
        readable = _role_actions(env, function)["secretsmanager:GetSecretValue"]
        database_secrets = [r for r in readable if r != json.dumps({"Ref": env.logical_id(stack.cache.auth_secret)})]
        assert database_secrets == [user_secrets[role]], role
        variable = _function(env, function)["Environment"]["Variables"]["CONSOLIDATOR_DATABASE_SECRET_ARN"]
        assert json.dumps(variable) == user_secrets[role], role
        assert function.node.dependencies and stack.migration.trigger in function.node.dependencies, role
