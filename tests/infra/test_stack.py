"""The synthesized stacks: what the issue requires, asserted on the CloudFormation templates."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from aws_cdk.assertions import Annotations, Match

pytestmark = pytest.mark.infra
MONITORING_ALARMS = 28  # the alarms monitoring.py builds (completion tracking adds 4)


def _only(resources: dict[str, dict]) -> dict:
    assert len(resources) == 1, list(resources)
    return next(iter(resources.values()))["Properties"]


def _function(env, function) -> dict:
    return env.resources("AWS::Lambda::Function")[env.logical_id(function)]["Properties"]


def test_each_environment_synthesizes_with_expected_resource_counts(env):
    config = env.config
    tracking = int(config.completion is not None)  # + acks function, its queues, schedule, alarms
    counts = {
        # ingest, flush, cleanup, migrate + CDK helpers (trigger, log retention, default-SG restriction)
        "AWS::Lambda::Function": 7 + tracking,
        "AWS::Lambda::EventSourceMapping": 1 + tracking,
        "AWS::Events::Rule": 2 + tracking,
        "AWS::SQS::Queue": 2 + 2 * tracking,
        "AWS::RDS::DBCluster": 1,
        "AWS::RDS::DBInstance": 1 + config.database.readers,
        "AWS::ElastiCache::ReplicationGroup": 1,
        # master, Redis AUTH token, one database user per function (ingest, flush, cleanup, acks)
        "AWS::SecretsManager::Secret": 2 + 3 + tracking,
        "AWS::SecretsManager::RotationSchedule": 1 + 3 + tracking,
        "AWS::CloudWatch::Alarm": MONITORING_ALARMS + 4 * tracking,
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
    ingest = {"Ref": env.logical_id(env.stack.ingest)}
    mapping = _only({k: r for k, r in env.resources("AWS::Lambda::EventSourceMapping").items()
                     if r["Properties"]["FunctionName"] == ingest})
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
    rotations = {json.dumps(r["Properties"]["SecretId"]): r
                 for r in env.resources("AWS::SecretsManager::RotationSchedule").values()}
    secrets = [env.stack.database.secret, *env.stack.database.users.values()]
    assert sorted(rotations) == sorted(json.dumps(env.stack.resolve(s.secret_arn)) for s in secrets)
    for rotation in rotations.values():
        expression = rotation["Properties"]["RotationRules"]["ScheduleExpression"]
        assert expression == f"rate({env.config.database.rotation_days} days)"
    # a function user's secret is first rotated once the migration has created the user
    trigger = next(iter(env.template.find_resources("Custom::Trigger")))
    master = json.dumps({"Ref": env.logical_id(env.stack.database.secret)})
    for secret_id, rotation in rotations.items():
        assert (trigger in rotation.get("DependsOn", [])) is (secret_id != master), secret_id


def test_database_admits_only_the_functions(env):
    database_sg = env.logical_id(env.stack.network.database_sg)
    sources = {
        json.dumps(r["Properties"]["SourceSecurityGroupId"])
        for r in env.resources("AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [database_sg, "GroupId"]}
    }
    functions = {
        json.dumps({"Fn::GetAtt": [env.stack.resolve(f.connections.security_groups[0].node.default_child.logical_id), "GroupId"]})
        for f in (env.stack.ingest, env.stack.flush, env.stack.cleanup, env.stack.migrate,
                  *([env.stack.acks] if env.stack.completion else []))
    }
    assert functions <= sources
    assert len(sources) == len(functions) + 1 + len(env.stack.database.users)  # + the rotation functions
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
        for key, r in env.resources("AWS::CloudWatch::Alarm").items() if key.startswith("Monitoring")
    }


def _metric(alarm: dict) -> tuple[str, str | None, list[dict]]:
    """(metric name, math expression or None, dimensions) of a plain or a math-expression alarm."""
    if "MetricName" in alarm:
        return alarm["MetricName"], None, alarm.get("Dimensions", [])
    returned = next(m for m in alarm["Metrics"] if m.get("ReturnData", True))
    expression = returned.get("Expression")  # None: a labelled plain metric
    if expression:
        expression = re.sub(r"^m_\w+ ", "m ", expression)  # the input's id is named after the label
    stat = next(m for m in alarm["Metrics"] if "MetricStat" in m)["MetricStat"]["Metric"]
    return stat["MetricName"], expression, stat.get("Dimensions", [])


def test_every_alarm_exists_with_its_threshold_in_human_units(env):
    alarms = _alarms(env)
    config, policy, fn = env.config.alarms, env.config.policy, env.config.functions
    bound_s = policy.hard_window_seconds + policy.tick_interval_seconds
    percent = config.duration_warning_percent / 100
    expected = {  # name: (metric, threshold, math expression turning it into the unit shown)
        "PendingAgeWarning": ("OldestPendingAge", bound_s, "m / 1000"),
        "PendingAgeCritical": ("OldestPendingAge", bound_s + policy.tick_interval_seconds, "m / 1000"),
        "DeadBatches": ("DeadBatches", 0, None),
        "BatchBuildFailures": ("BatchBuildFailures", 0, None),
        "RecordsFailed": ("RecordsFailed", 0, None),
        "EventsExpired": ("EventsExpired", 0, None),
        "DeadLetterQueueNotEmpty": ("ApproximateNumberOfMessagesVisible", 0, None),
        "IngestFailuresNotEmpty": ("ApproximateNumberOfMessagesVisible", 0, None),
        "DeadLetterAgeWarning": ("ApproximateAgeOfOldestMessage", config.dead_letter_age_warning_hours, "m / 3600"),
        "DeadLetterAgeCritical": ("ApproximateAgeOfOldestMessage", config.dead_letter_age_critical_days * 24,
                                  "m / 3600"),
        "IngestErrors": ("Errors", config.function_errors, None),
        "FlushErrors": ("Errors", config.function_errors, None),
        "CleanupErrors": ("Errors", config.function_errors, None),
        "IngestThrottles": ("Throttles", config.function_throttles, None),
        "FlushThrottles": ("Throttles", config.flush_throttles, None),
        "CleanupThrottles": ("Throttles", config.function_throttles, None),
        "IngestDurationNearTimeout": ("Duration", round(fn.ingest_timeout_seconds * percent, 1), "m / 1000"),
        "FlushDurationNearTimeout": ("Duration", fn.flush_timeout_seconds - 1, "m / 1000"),
        "CleanupDurationNearTimeout": ("Duration", round(fn.cleanup_timeout_seconds * percent, 1), "m / 1000"),
        "IngestOffsetLag": ("OffsetLag", config.offset_lag_records, None),
        "FlushTicksSkipped": ("TicksSkipped", 0, None),
        "FlushNotRunning": ("Invocations", 1, None),
        "PartitionDropRefused": ("PartitionDropsRefused", 0, None),
        "DatabaseCpu": ("CPUUtilization", config.database_cpu_percent, None),
        "DatabaseCapacityAtMax": ("ACUUtilization", config.database_capacity_percent, None),
        "DatabaseConnections": ("DatabaseConnections", config.database_connections, None),
        "CacheCpu": ("EngineCPUUtilization", config.cache_cpu_percent, None),
        "CacheMemory": ("DatabaseMemoryUsagePercentage", config.cache_memory_percent, None),
    }
    if env.config.completion:
        expected |= {
            "AcksDeadLetterNotEmpty": ("ApproximateNumberOfMessagesVisible", 0, None),
            "AcksErrors": ("Errors", config.function_errors, None),
            "IncompleteBatches": ("IncompleteBatches", 0, None),
            "CompletionPublishFailures": ("CompletionPublishFailures", 0, None),
        }
    assert set(alarms) == set(expected)
    for name, (metric, threshold, expression) in expected.items():
        alarm = alarms[name]
        assert _metric(alarm)[:2] == (metric, expression), name
        assert alarm["Threshold"] == threshold, name
        assert alarm["AlarmActions"] and alarm["OKActions"], name
        assert alarm["AlarmName"] == f"consolidator-{env.config.name}-{name}"
        assert alarm["AlarmDescription"].startswith(("WARNING: ", "CRITICAL: ")), name
        assert alarm["AlarmDescription"].endswith(f"Runbook: {config.runbook_base_url}#{name.lower()}"), name
    assert alarms["PendingAgeCritical"]["AlarmDescription"].startswith("CRITICAL")
    assert alarms["PendingAgeWarning"]["AlarmDescription"].startswith("WARNING")
    assert alarms["FlushTicksSkipped"]["EvaluationPeriods"] == config.skipped_ticks_minutes
    assert alarms["RecordsFailed"]["EvaluationPeriods"] == config.records_failed_minutes
    for name in ("FlushTicksSkipped", "RecordsFailed", "DeadBatches", "PendingAgeCritical"):
        dimensions = {d["Name"]: d["Value"] for d in _metric(alarms[name])[2]}
        assert dimensions["environment"] == env.config.name, name
    assert alarms["FlushNotRunning"]["TreatMissingData"] == "breaching"
    assert alarms["FlushNotRunning"]["ComparisonOperator"] == "LessThanThreshold"


def test_every_alarm_has_a_runbook_entry():
    runbook = (Path(__file__).resolve().parents[2] / "docs/runbook.md").read_text()
    headings = {line.removeprefix("## ").strip().lower() for line in runbook.splitlines() if line.startswith("## ")}
    from consolidator_infra import completion, monitoring

    source = Path(monitoring.__file__).read_text() + Path(completion.__file__).read_text()
    names = set(re.findall(r'"([A-Z][A-Za-z]+)", Severity\.', source))
    names |= {f"{label}{kind}" for label in ("Ingest", "Flush", "Cleanup")
              for kind in ("Errors", "Throttles", "DurationNearTimeout")}
    names |= {"DeadLetterQueueNotEmpty", "IngestFailuresNotEmpty"}
    assert len(names) == MONITORING_ALARMS + 4  # and 4 in completion.py
    assert {n.lower() for n in names} <= headings, sorted({n.lower() for n in names} - headings)


def test_functions_get_the_environment_for_the_metrics_dimension(env):
    for function in (env.stack.ingest, env.stack.flush, env.stack.cleanup):
        variables = _function(env, function)["Environment"]["Variables"]
        assert variables["CONSOLIDATOR_ENVIRONMENT"] == env.config.name


def test_dashboard_labels_every_series_shows_thresholds_and_alarm_states(env):
    body = _only(env.resources("AWS::CloudWatch::Dashboard"))["DashboardBody"]
    text = json.dumps(body)
    for metric in ("RecordsIngested", "RecordsCoalesced", "BatchesFlushedIdle", "BatchesFlushedHardWindow",
                   "BatchesFlushedFull", "BatchSize", "EventToPublishLatency", "OldestPendingAge", "OffsetLag",
                   "RecordsFailed", "ApproximateAgeOfOldestMessage", "ACUUtilization", "EngineCPUUtilization"):
        assert metric in text, metric
    rendered = json.loads("".join(part if isinstance(part, str) else "0" for part in body["Fn::Join"][1]))
    widgets = rendered["widgets"]
    tracking = 1 if env.config.completion else 0
    assert widgets[0]["type"] == "alarm" and len(widgets[0]["properties"]["alarms"]) == MONITORING_ALARMS + 4 * tracking
    graphs = [w["properties"] for w in widgets if w["type"] == "metric"]
    for graph in graphs:
        for series in graph["metrics"]:
            options = series[-1] if isinstance(series[-1], dict) else {}
            if options.get("visible") is False:
                continue  # the input of a math expression, hidden
            assert options.get("label"), (graph["title"], series)
    assert sum(len(g.get("annotations", {}).get("horizontal", [])) for g in graphs) >= 8
    titles = [g["title"] for g in graphs]
    assert "Event-to-publish latency (seconds)" in titles and "Oldest PENDING event (seconds)" in titles


def test_the_dashboard_draws_the_panel_list_the_grafana_dashboard_draws(env):
    """The product graphs are the one panel list (consolidator.services.panels): each panel with a
    series the functions record, under its title, each such series under its label, its metric
    and its statistic; latency percentiles of the EMF metric, shown in seconds."""
    from consolidator.services.panels import CLOUDWATCH_STATS, PANELS

    body = _only(env.resources("AWS::CloudWatch::Dashboard"))["DashboardBody"]
    rendered = json.loads("".join(part if isinstance(part, str) else "0" for part in body["Fn::Join"][1]))
    graphs = {w["properties"]["title"]: w["properties"] for w in rendered["widgets"] if w["type"] == "metric"}
    for panel in PANELS:
        drawn = [s for s in (*panel.left, *panel.right) if s.on_functions]
        if not drawn:
            assert panel.title not in graphs
            continue
        series = graphs[panel.title]["metrics"]
        for wanted in drawn:
            found = [m for m in series if wanted.metric in m and isinstance(m[-1], dict)  # Average: the default
                     and m[-1].get("stat", "Average") == CLOUDWATCH_STATS[wanted.stat]]
            assert found, (panel.title, wanted)
            labels = [m[-1].get("label") for m in series if isinstance(m[-1], dict)]
            assert wanted.label in labels, (panel.title, wanted.label, labels)
    latency = json.dumps(graphs["Event-to-publish latency (seconds)"]["metrics"])
    assert '"stat": "p99"' in latency and "/ 1000" in latency


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



def test_tracing_is_wired_per_environment(env):
    """An environment with a collector layer: every function carries it and the standard OTEL_*
    variables (OTLP over HTTP to the extension); without one, no OTEL_* variable and no layer."""
    from consolidator_infra.functions import otel_environment

    layer = env.config.functions.tracing_layer_arn
    for name in ("ingest", "flush", "cleanup"):
        properties = _function(env, getattr(env.stack, name))
        variables = properties["Environment"]["Variables"]
        if layer is None:
            assert "Layers" not in properties and not any(k.startswith("OTEL_") for k in variables)
        else:
            assert properties["Layers"] == [layer]
            assert {k: v for k, v in variables.items() if k.startswith("OTEL_")} == otel_environment(name)
    assert (env.config.name == "staging") == (layer is not None)
