"""The synthesized stacks: what the issue requires, asserted on the CloudFormation templates."""

from __future__ import annotations

import json
import re

import pytest
from aws_cdk.assertions import Annotations, Match

pytestmark = pytest.mark.infra


def _only(resources: dict[str, dict]) -> dict:
    assert len(resources) == 1, list(resources)
    return next(iter(resources.values()))["Properties"]


def _function(env, function) -> dict:
    return env.resources("AWS::Lambda::Function")[env.logical_id(function)]["Properties"]


def test_each_environment_synthesizes_with_expected_resource_counts(env):
    config = env.config
    counts = {
        # ingest, flush, cleanup, migrate + CDK helpers (trigger, log retention, default-SG restriction)
        "AWS::Lambda::Function": 7,
        "AWS::Lambda::EventSourceMapping": 1,
        "AWS::Events::Rule": 2,
        "AWS::SQS::Queue": 2,
        "AWS::RDS::DBCluster": 1,
        "AWS::RDS::DBInstance": 1 + config.database.readers,
        "AWS::ElastiCache::ReplicationGroup": 1,
        "AWS::SecretsManager::Secret": 2,
        "AWS::SecretsManager::RotationSchedule": 1,
        "AWS::CloudWatch::Alarm": 16,  # 15 + EventsExpired
        "AWS::CloudWatch::Dashboard": 1,
        "AWS::EC2::VPC": 1,
        "AWS::EC2::NatGateway": config.network.nat_gateways,
        "AWS::EC2::FlowLog": 1,
        "Custom::Trigger": 1,
        "AWS::SNS::Topic": 0 if config.alarms.sns_topic_arn else 1,
    }
    for type_, expected in counts.items():
        env.template.resource_count_is(type_, expected)


def test_ingest_mapping_is_offset_safe(env):
    msk = env.config.msk
    mapping = _only(env.resources("AWS::Lambda::EventSourceMapping"))
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["ProvisionedPollerConfig"] == {
        "MinimumPollers": msk.minimum_pollers, "MaximumPollers": msk.maximum_pollers,
    }
    assert 0 <= mapping["MaximumRetryAttempts"] == msk.retry_attempts <= 10_000
    assert 0 < mapping["MaximumRecordAgeInSeconds"] == msk.max_record_age_seconds
    destination = mapping["DestinationConfig"]["OnFailure"]["Destination"]
    assert destination == {"Fn::GetAtt": [env.logical_id(env.stack.dead_letters.ingest_failures), "Arn"]}
    assert mapping["Topics"] == [msk.topic]
    assert mapping["EventSourceArn"] == msk.cluster_arn
    assert mapping["AmazonManagedKafkaEventSourceConfig"] == {"ConsumerGroupId": msk.consumer_group_id}
    assert mapping["FunctionName"] == {"Ref": env.logical_id(env.stack.ingest)}
    assert "KafkaMetrics" in mapping["MetricsConfig"]["Metrics"]


def test_flush_runs_alone_every_minute_and_never_piles_up(env):
    flush = _function(env, env.stack.flush)
    assert flush["ReservedConcurrentExecutions"] == 1
    assert flush["Timeout"] < 60  # one invocation ends before the next tick
    variables = flush["Environment"]["Variables"]
    assert variables["CONSOLIDATOR_LOCK_TTL_SECONDS"] == str(flush["Timeout"])

    flush_id = env.logical_id(env.stack.flush)
    rules = [r["Properties"] for r in env.resources("AWS::Events::Rule").values()
             if r["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": [flush_id, "Arn"]}]
    assert len(rules) == 1
    assert rules[0]["ScheduleExpression"] == "rate(1 minute)"
    assert rules[0]["Targets"][0]["RetryPolicy"] == {"MaximumRetryAttempts": 0, "MaximumEventAgeInSeconds": 60}

    configs = [r["Properties"] for r in env.resources("AWS::Lambda::EventInvokeConfig").values()
               if r["Properties"]["FunctionName"] == {"Ref": flush_id}]
    assert configs == [{"FunctionName": {"Ref": flush_id}, "Qualifier": "$LATEST",
                        "MaximumRetryAttempts": 0, "MaximumEventAgeInSeconds": 60}]


def test_cleanup_runs_daily(env):
    cleanup_id = env.logical_id(env.stack.cleanup)
    rules = [r["Properties"] for r in env.resources("AWS::Events::Rule").values()
             if r["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": [cleanup_id, "Arn"]}]
    assert [r["ScheduleExpression"] for r in rules] == [
        f"cron(17 {env.config.functions.cleanup_schedule_hour_utc} * * ? *)"
    ]


def test_functions_share_one_shape(env):
    for function in (env.stack.ingest, env.stack.flush, env.stack.cleanup, env.stack.migrate):
        props = _function(env, function)
        assert props["Runtime"] == "python3.12"
        assert props["Architectures"] == ["arm64"]
        assert props["Handler"] == "handler.handler"
        assert props["TracingConfig"] == {"Mode": "Active"}
        assert props["VpcConfig"]["SubnetIds"]
        variables = props["Environment"]["Variables"]
        assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "Consolidator"
        assert "CONSOLIDATOR_DATABASE_SECRET_ARN" in variables


def test_flush_environment_matches_the_settings(env):
    variables = _function(env, env.stack.flush)["Environment"]["Variables"]
    policy = env.config.policy
    assert variables["CONSOLIDATOR_HARD_WINDOW_SECONDS"] == str(policy.hard_window_seconds)
    assert variables["CONSOLIDATOR_SINK_URL"] == env.config.sink_url()
    redis_url = json.dumps(variables["CONSOLIDATOR_REDIS_URL"])
    assert redis_url.startswith('{"Fn::Join"') and "rediss://" in redis_url
    assert "CONSOLIDATOR_REDIS_AUTH_SECRET_ARN" in variables
    dead_letter = json.dumps(variables["CONSOLIDATOR_DEAD_LETTER_URL"])
    assert "sqs://sqs." in dead_letter


def test_database_is_encrypted_private_tls_only_with_a_rotating_secret(env):
    cluster = _only(env.resources("AWS::RDS::DBCluster"))
    assert cluster["Engine"] == "aurora-mysql"
    assert cluster["EngineVersion"].startswith("8.0.mysql_aurora.3.")
    assert cluster["StorageEncrypted"] is True
    assert cluster["ServerlessV2ScalingConfiguration"] == {
        "MinCapacity": env.config.database.min_capacity, "MaxCapacity": env.config.database.max_capacity,
    }
    assert cluster["DeletionProtection"] is env.config.database.deletion_protection
    for instance in env.resources("AWS::RDS::DBInstance").values():
        assert instance["Properties"]["PubliclyAccessible"] is False
        assert instance["Properties"]["DBInstanceClass"] == "db.serverless"
    params = _only(env.resources("AWS::RDS::DBClusterParameterGroup"))
    assert params["Parameters"]["require_secure_transport"] == "ON"
    subnet_group = _only(env.resources("AWS::RDS::DBSubnetGroup"))
    subnets = env.resources("AWS::EC2::Subnet")
    for ref in subnet_group["SubnetIds"]:
        assert subnets[ref["Ref"]]["Properties"]["MapPublicIpOnLaunch"] is False
        tags = {t["Key"]: t["Value"] for t in subnets[ref["Ref"]]["Properties"]["Tags"]}
        assert tags["aws-cdk:subnet-type"] == "Isolated"
    rotation = _only(env.resources("AWS::SecretsManager::RotationSchedule"))
    assert rotation["SecretId"] == {"Ref": env.logical_id(env.stack.database.secret)}
    assert rotation["RotationRules"]["ScheduleExpression"] == f"rate({env.config.database.rotation_days} days)"


def test_database_admits_only_the_functions(env):
    database_sg = env.logical_id(env.stack.network.database_sg)
    sources = {
        json.dumps(r["Properties"]["SourceSecurityGroupId"])
        for r in env.resources("AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [database_sg, "GroupId"]}
    }
    functions = {
        json.dumps({"Fn::GetAtt": [env.stack.resolve(f.connections.security_groups[0].node.default_child.logical_id), "GroupId"]})
        for f in (env.stack.ingest, env.stack.flush, env.stack.cleanup, env.stack.migrate)
    }
    assert functions <= sources
    assert len(sources) == len(functions) + 1  # + the rotation function
    groups = env.resources("AWS::EC2::SecurityGroup")
    for group in groups.values():
        for rule in group["Properties"].get("SecurityGroupIngress", []):
            assert rule.get("CidrIp") != "0.0.0.0/0"


def test_cache_has_transit_encryption_and_auth(env):
    group = _only(env.resources("AWS::ElastiCache::ReplicationGroup"))
    assert group["TransitEncryptionEnabled"] is True
    assert group["TransitEncryptionMode"] == "required"
    assert group["AtRestEncryptionEnabled"] is True
    secret_id = env.logical_id(env.stack.cache.auth_secret)
    assert group["AuthToken"] == {"Fn::Join": ["", ["{{resolve:secretsmanager:", {"Ref": secret_id}, ":SecretString:::}}"]]}
    assert group["MultiAZEnabled"] is (env.config.cache.replicas > 0)
    cache_sg = env.logical_id(env.stack.network.cache_sg)
    flush_sg = env.stack.resolve(env.stack.flush.connections.security_groups[0].node.default_child.logical_id)
    ingress = [r["Properties"] for r in env.resources("AWS::EC2::SecurityGroupIngress").values()
               if r["Properties"]["GroupId"] == {"Fn::GetAtt": [cache_sg, "GroupId"]}]
    assert [(r["SourceSecurityGroupId"], r["FromPort"]) for r in ingress] == [({"Fn::GetAtt": [flush_sg, "GroupId"]}, 6379)]


def _alarms(env) -> dict[str, dict]:
    return {
        re.sub(r"[0-9A-F]{8}$", "", key.removeprefix("Monitoring")): r["Properties"]
        for key, r in env.resources("AWS::CloudWatch::Alarm").items()
    }


def test_every_alarm_exists_with_its_threshold(env):
    alarms = _alarms(env)
    config, policy = env.config.alarms, env.config.policy
    expected = {
        "OldestPendingAge": ("OldestPendingAge", (policy.hard_window_seconds + 2 * policy.tick_interval_seconds) * 1000),
        "DeadBatches": ("DeadBatches", 0),
        "EventsExpired": ("EventsExpired", 0),
        "DeadLetterQueueNotEmpty": ("ApproximateNumberOfMessagesVisible", 0),
        "IngestFailuresNotEmpty": ("ApproximateNumberOfMessagesVisible", 0),
        "IngestErrors": ("Errors", config.function_errors),
        "FlushErrors": ("Errors", config.function_errors),
        "CleanupErrors": ("Errors", config.function_errors),
        "IngestThrottles": ("Throttles", config.function_throttles),
        "FlushThrottles": ("Throttles", config.flush_throttles),
        "CleanupThrottles": ("Throttles", config.function_throttles),
        "IngestOffsetLag": ("OffsetLag", config.offset_lag_records),
        "FlushTicksSkipped": ("TicksSkipped", 0),
        "FlushNotRunning": ("Invocations", 1),
        "DatabaseCpu": ("CPUUtilization", config.database_cpu_percent),
        "DatabaseConnections": ("DatabaseConnections", config.database_connections),
    }
    assert set(alarms) == set(expected)
    for name, (metric, threshold) in expected.items():
        alarm = alarms[name]
        assert alarm["MetricName"] == metric, name
        assert alarm["Threshold"] == threshold, name
        assert alarm["AlarmActions"], name
        assert "Runbook: README.md#alarms" in alarm["AlarmDescription"]
    assert alarms["FlushTicksSkipped"]["EvaluationPeriods"] == config.skipped_ticks_minutes
    assert alarms["FlushTicksSkipped"]["Dimensions"] == [{"Name": "service", "Value": "flush"}]
    assert alarms["FlushNotRunning"]["TreatMissingData"] == "breaching"
    assert alarms["FlushNotRunning"]["ComparisonOperator"] == "LessThanThreshold"


def test_dashboard_shows_the_product_metrics(env):
    body = json.dumps(_only(env.resources("AWS::CloudWatch::Dashboard"))["DashboardBody"])
    for metric in ("RecordsIngested", "RecordsCoalesced", "BatchesFlushedIdle", "BatchesFlushedHardWindow",
                   "BatchesFlushedFull", "BatchSize", "EventToPublishLatency", "OldestPendingAge", "OffsetLag"):
        assert metric in body, metric


def test_cdk_nag_has_no_unsuppressed_finding(env):
    annotations = Annotations.from_stack(env.stack)
    errors = annotations.find_error("*", Match.string_like_regexp("AwsSolutions-.*"))
    warnings = annotations.find_warning("*", Match.string_like_regexp("AwsSolutions-.*"))
    assert [(e.id, str(e.entry.data)[:120]) for e in errors + warnings] == []


def test_every_nag_suppression_has_a_reason(env):
    suppressed = 0
    for resource in env.template.to_json()["Resources"].values():
        for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", []):
            suppressed += 1
            assert len(rule["reason"]) >= 40, rule
    assert suppressed > 0


def _statements(env):
    for key, resource in env.template.to_json()["Resources"].items():
        if resource["Type"] == "AWS::IAM::Policy":
            yield key, resource["Properties"]["PolicyDocument"]["Statement"]
        elif resource["Type"] == "AWS::IAM::Role":
            for policy in resource["Properties"].get("Policies", []):
                yield key, policy["PolicyDocument"]["Statement"]


def test_no_iam_statement_has_a_wildcard_action(env):
    checked = 0
    for key, statements in _statements(env):
        for statement in statements:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            for action in actions:
                checked += 1
                assert action != "*" and not action.endswith(":*"), (key, action)
    assert checked > 20


def _role_actions(env, function) -> dict[str, list]:
    role = env.stack.resolve(function.role.node.default_child.logical_id)
    actions: dict[str, list] = {}
    for resource in env.resources("AWS::IAM::Policy").values():
        if {"Ref": role} in resource["Properties"]["Roles"]:
            for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                for action in statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]:
                    actions.setdefault(action, []).append(json.dumps(statement["Resource"]))
    return actions


def test_each_function_role_holds_only_what_it_uses(env):
    stack = env.stack
    kafka_read = {"kafka-cluster:ReadData", "kafka-cluster:AlterGroup"}
    kafka_write = {"kafka-cluster:WriteData", "kafka-cluster:WriteDataIdempotently"}
    ingest, flush = _role_actions(env, stack.ingest), _role_actions(env, stack.flush)
    cleanup, migrate = _role_actions(env, stack.cleanup), _role_actions(env, stack.migrate)
    redis_secret = env.logical_id(stack.cache.auth_secret)

    assert kafka_read <= set(ingest) and not kafka_write & set(ingest)
    assert "sqs:SendMessage" in ingest
    assert not any(redis_secret in r for rs in ingest.values() for r in rs)

    if env.config.sink.kind == "kafka":
        assert kafka_write <= set(flush) and not kafka_read & set(flush)
    assert any(redis_secret in r for r in flush["secretsmanager:GetSecretValue"])

    for role in (cleanup, migrate):
        assert set(role) == {"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret",
                             "xray:PutTraceSegments", "xray:PutTelemetryRecords"}
        assert not any(redis_secret in r for rs in role.values() for r in rs)


def test_migrations_run_on_deploy_after_the_database(env):
    trigger = next(iter(env.template.find_resources("Custom::Trigger").values()))
    assert trigger["Properties"]["InvocationType"] == "RequestResponse"
    version = env.resources("AWS::Lambda::Version")[trigger["Properties"]["HandlerArn"]["Ref"]]
    assert version["Properties"]["FunctionName"] == {"Ref": env.logical_id(env.stack.migrate)}
    cluster = env.logical_id(env.stack.database.cluster)
    assert cluster in trigger["DependsOn"]
    writer = next(k for k in env.resources("AWS::RDS::DBInstance"))
    assert writer in trigger["DependsOn"]
    migrate_sg = env.stack.resolve(env.stack.migrate.connections.security_groups[0].node.default_child.logical_id)
    database_sg = env.logical_id(env.stack.network.database_sg)
    rule = next(k for k, r in env.resources("AWS::EC2::SecurityGroupIngress").items()
                if r["Properties"]["GroupId"] == {"Fn::GetAtt": [database_sg, "GroupId"]}
                and r["Properties"]["SourceSecurityGroupId"] == {"Fn::GetAtt": [migrate_sg, "GroupId"]})
    assert rule in trigger["DependsOn"]  # it can reach MySQL when it runs
