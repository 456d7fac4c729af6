"""The optional EMR Serverless construct: application, least-privilege job role, bucket."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.infra


@pytest.fixture(scope="module")
def template():
    from aws_cdk import App, Environment, Stack
    from aws_cdk import aws_ec2 as ec2
    from aws_cdk import aws_sqs as sqs
    from aws_cdk.assertions import Template
    from consolidator_infra.emr_serverless import RELEASE_LABEL, SparkOnEmrServerless

    app = App()
    stack = Stack(app, "SparkTest", env=Environment(account="111122223333", region="eu-west-1"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
    queue = sqs.Queue(stack, "Dlq")
    SparkOnEmrServerless(
        stack, "Spark", vpc=vpc, dead_letter_queue=queue,
        msk_cluster_arn="arn:aws:kafka:eu-west-1:111122223333:cluster/orders/abcd-1234",
        source_topic="orders", output_topic="order-batches",
    )
    assert RELEASE_LABEL.startswith("emr-spark-8")
    return Template.from_stack(stack)


def _statements(template) -> list[dict]:
    policies = template.find_resources("AWS::IAM::Policy")
    return [s for p in policies.values() for s in p["Properties"]["PolicyDocument"]["Statement"]]


def _text(value) -> str:
    return json.dumps(value, sort_keys=True)


def test_application_is_spark_4_auto_stopping_in_the_vpc(template):
    [app] = template.find_resources("AWS::EMRServerless::Application").values()
    props = app["Properties"]
    assert (props["Type"], props["ReleaseLabel"]) == ("SPARK", "emr-spark-8.0.0")
    # the machine `make emr-archive` builds the job's Python environment for
    assert props["Architecture"] == "ARM64"
    assert props["AutoStopConfiguration"] == {"Enabled": True, "IdleTimeoutMinutes": 15}
    assert props["MaximumCapacity"] == {"Cpu": "16 vCPU", "Memory": "64 GB"}
    assert len(props["NetworkConfiguration"]["SubnetIds"]) == 2


def test_job_role_is_assumed_only_by_this_application(template):
    [role] = template.find_resources("AWS::IAM::Role", {
        "Properties": {"Description": "Consolidator Spark job on EMR Serverless: code, checkpoints, MSK topics, DLQ"}
    }).values()
    [statement] = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "emr-serverless.amazonaws.com"}
    assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": "111122223333"}
    assert "Fn::GetAtt" in _text(statement["Condition"]["ArnLike"]["aws:SourceArn"])


def test_job_role_permissions_are_scoped(template):
    statements = _statements(template)
    for statement in statements:
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        assert "*" not in resources, statement  # nothing account-wide
        assert statement["Effect"] == "Allow"
    by_action = {}
    for statement in statements:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        for action in actions:
            by_action.setdefault(action, []).append(_text(statement["Resource"]))
    assert any("/code/*" in r for r in by_action["s3:GetObject*"])
    assert any("/checkpoints/*" in r for r in by_action["s3:DeleteObject*"])
    assert not any("/code/*" in r for r in by_action["s3:DeleteObject*"])  # code is read-only
    assert by_action["kafka-cluster:Connect"] == [
        '"arn:aws:kafka:eu-west-1:111122223333:cluster/orders/abcd-1234"']
    [read] = by_action["kafka-cluster:ReadData"]
    [write] = by_action["kafka-cluster:WriteData"]
    assert ":topic/" in read and "/orders" in read and "order-batches" not in read
    assert ":topic/" in write and "/order-batches" in write
    assert "sqs:SendMessage" in by_action
    assert "sqs:ReceiveMessage" not in by_action and "kafka-cluster:*" not in by_action


def test_bucket_is_private_encrypted_and_tls_only(template):
    [bucket] = template.find_resources("AWS::S3::Bucket").values()
    props = bucket["Properties"]
    assert props["PublicAccessBlockConfiguration"]["BlockPublicAcls"] is True
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0][
        "ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    [policy] = template.find_resources("AWS::S3::BucketPolicy").values()
    assert "aws:SecureTransport" in _text(policy)


def test_environment_with_spark_gets_the_application(synthesized):
    """staging.json sets ``spark: true``; dev and prod do not."""
    counts = {name: len(s.resources("AWS::EMRServerless::Application")) for name, s in synthesized.items()}
    assert counts == {"dev": 0, "staging": 1, "prod": 0}
