"""Completion tracking in the synthesized stacks: acks queue + DLQ, the acks function with
partial batch failures, least-privilege grants, the sweep schedule, alarms, flush sealing on."""

from __future__ import annotations

import json

import pytest
from consolidator_infra.config_sink import sink_url_of
from test_stack import _function, _role_actions

pytestmark = pytest.mark.infra


def test_tracking_is_wired_only_where_configured(env):
    flush = _function(env, env.stack.flush)["Environment"]["Variables"]
    cleanup = _function(env, env.stack.cleanup)["Environment"]["Variables"]
    if env.config.completion is None:
        assert env.stack.completion is None
        assert "CONSOLIDATOR_COMPLETION_TRACKING" not in flush
        assert "CONSOLIDATOR_COMPLETION_MAX_AGE_SECONDS" not in cleanup
        return
    completion = env.config.completion
    assert flush["CONSOLIDATOR_COMPLETION_TRACKING"] == "true"
    assert cleanup["CONSOLIDATOR_COMPLETION_MAX_AGE_SECONDS"] == str(completion.max_age_days * 86_400)
    acks = _function(env, env.stack.acks)
    assert acks["Handler"] == "handler.handler" and acks["Runtime"] == "python3.12"
    variables = acks["Environment"]["Variables"]
    assert variables["CONSOLIDATOR_COMPLETION_SINK_URL"] == sink_url_of(completion.sink, env.config.region)
    assert variables["CONSOLIDATOR_COMPLETION_DEADLINE_SECONDS"] == str(completion.deadline_seconds)
    assert "CONSOLIDATOR_DATABASE_SECRET_ARN" in variables


def test_acks_queue_feeds_the_function_with_partial_failures_and_a_dead_letter_queue(env):
    if env.config.completion is None:
        pytest.skip("completion tracking off in this environment")
    completion, tracking = env.config.completion, env.stack.completion
    queue_id, dlq_id = env.logical_id(tracking.queue), env.logical_id(tracking.dead_letter)
    queue = env.resources("AWS::SQS::Queue")[queue_id]["Properties"]
    assert queue["RedrivePolicy"] == {"deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
                                      "maxReceiveCount": completion.max_receive_count}
    assert queue["SqsManagedSseEnabled"] is True
    assert queue["VisibilityTimeout"] == 6 * completion.timeout_seconds
    mappings = [r["Properties"] for r in env.resources("AWS::Lambda::EventSourceMapping").values()
                if r["Properties"]["FunctionName"] == {"Ref": env.logical_id(env.stack.acks)}]
    assert len(mappings) == 1
    assert mappings[0]["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    assert mappings[0]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mappings[0]["BatchSize"] == completion.batch_size
    acks_id = env.logical_id(env.stack.acks)
    rules = [r["Properties"] for r in env.resources("AWS::Events::Rule").values()
             if r["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": [acks_id, "Arn"]}]
    assert [r["ScheduleExpression"] for r in rules] == [f"rate({completion.sweep_minutes} minutes)"]


def test_acks_role_holds_only_what_it_uses(env):
    if env.config.completion is None:
        pytest.skip("completion tracking off in this environment")
    actions = _role_actions(env, env.stack.acks)
    queue = json.dumps({"Fn::GetAtt": [env.logical_id(env.stack.completion.queue), "Arn"]})
    for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"):
        assert actions[action] == [queue], action
    assert not any(env.logical_id(env.stack.cache.auth_secret) in r for rs in actions.values() for r in rs)
    sink = env.config.completion.sink
    if sink.kind == "sqs":
        assert actions["sqs:SendMessage"] == [json.dumps(sink.queue_arn)]
    elif sink.kind == "kafka":
        assert "kafka-cluster:WriteData" in actions and "sqs:SendMessage" not in actions
    assert {a.split(":")[0] for a in actions} <= {"sqs", "kafka-cluster", "events", "secretsmanager", "xray"}


def test_completion_alarms(env):
    if env.config.completion is None:
        pytest.skip("completion tracking off in this environment")
    def metric_name(alarm) -> str:
        cfn = alarm.node.default_child  # a labelled metric renders as a one-query metrics list
        return env.stack.resolve(cfn.metric_name) or env.stack.resolve(cfn.metrics)[0]["metricStat"]["metric"]["metricName"]

    alarms = {name: metric_name(alarm) for name, alarm in env.stack.completion.alarms.items()}
    assert alarms == {"AcksDeadLetterNotEmpty": "ApproximateNumberOfMessagesVisible", "AcksErrors": "Errors",
                      "IncompleteBatches": "IncompleteBatches", "CompletionPublishFailures": "CompletionPublishFailures"}
    for alarm in env.stack.completion.alarms.values():
        assert env.stack.resolve(alarm.node.default_child.alarm_actions)


def test_only_the_configured_senders_may_send_acks(env):
    """The queue policy allows the environment's senders and denies sqs:SendMessage to every
    other principal, whatever their IAM policies say."""
    if env.config.completion is None:
        pytest.skip("completion tracking off in this environment")
    completion = env.config.completion
    queue_ref = {"Ref": env.logical_id(env.stack.completion.queue)}
    (policy,) = [r["Properties"]["PolicyDocument"]["Statement"] for r in env.resources("AWS::SQS::QueuePolicy").values()
                 if queue_ref in r["Properties"]["Queues"]]
    statements = {s.get("Sid"): s for s in policy}
    allow, deny = statements["AckSenders"], statements["OnlyAckSenders"]
    assert allow["Effect"] == "Allow" and allow["Action"] == "sqs:SendMessage"
    principals = allow["Principal"]["AWS"]
    assert sorted(principals if isinstance(principals, list) else [principals]) == sorted(completion.senders)
    assert deny["Effect"] == "Deny" and deny["Action"] == "sqs:SendMessage" and deny["Principal"] == {"AWS": "*"}
    assert deny["Condition"] == {"ArnNotLike": {"aws:PrincipalArn": completion.sender_principal_arns()}}


def test_an_ack_flood_holds_a_bounded_number_of_database_connections(env):
    """The event source runs at most max_concurrency instances, within the function's reserved
    concurrency: each holds one database connection."""
    if env.config.completion is None:
        pytest.skip("completion tracking off in this environment")
    completion = env.config.completion
    acks_id = env.logical_id(env.stack.acks)
    (mapping,) = [r["Properties"] for r in env.resources("AWS::Lambda::EventSourceMapping").values()
                  if r["Properties"]["FunctionName"] == {"Ref": acks_id}]
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": completion.max_concurrency}
    assert _function(env, env.stack.acks)["ReservedConcurrentExecutions"] == completion.reserved_concurrency
    assert completion.max_concurrency <= completion.reserved_concurrency < env.config.alarms.database_connections


def test_every_function_tells_its_sinks_a_timeout_well_below_its_own(env):
    from consolidator.settings import sink_timeout_seconds

    for function in env.resources("AWS::Lambda::Function").values():
        properties = function["Properties"]
        variables = properties.get("Environment", {}).get("Variables", {})
        if "POWERTOOLS_SERVICE_NAME" not in variables:
            continue  # CDK's own helpers
        declared = float(variables["CONSOLIDATOR_FUNCTION_TIMEOUT_SECONDS"])
        assert declared == properties["Timeout"]
        assert sink_timeout_seconds(declared) <= properties["Timeout"] / 3
