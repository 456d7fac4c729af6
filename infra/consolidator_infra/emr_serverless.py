"""Optional: the Spark streaming aggregator on EMR Serverless.

One construct: an S3 bucket (``code/`` for ``entry.py`` and the environment archive that
``make emr-archive`` builds, ``checkpoints/`` for the streaming state, ``logs/``), an EMR
Serverless Spark application (AWS runtime for Apache Spark 4, auto start/stop, capped capacity,
in the VPC when given), and the job role. The release and the architecture come from
``consolidator.spark.emr``, as do the Python and machine the archive is built for. The job role
is scoped to exactly what the job does: read code, read/write checkpoints, write logs, connect to
the MSK cluster with IAM, read the source topic, write the output topic, use its own consumer
groups, and send to the dead-letter queue. ``consolidator spark emr-submit`` starts the job.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, Fn, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_emrserverless as emr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from consolidator.spark.emr import ARCHITECTURE, RELEASE_LABEL


def _msk_arn(cluster_arn: str, kind: str, name: str) -> str:
    """``arn:...:cluster/<name>/<uuid>`` -> ``arn:...:<kind>/<name>/<uuid>/<name>`` (tokens allowed)."""
    parts = Fn.split(":cluster/", cluster_arn)
    return Fn.join("", [Fn.select(0, parts), f":{kind}/", Fn.select(1, parts), f"/{name}"])


class SparkOnEmrServerless(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        msk_cluster_arn: str,
        source_topic: str,
        output_topic: str,
        dead_letter_queue: sqs.IQueue | None = None,
        vpc: ec2.IVpc | None = None,
        subnet_type: ec2.SubnetType = ec2.SubnetType.PRIVATE_WITH_EGRESS,
        security_groups: Sequence[ec2.ISecurityGroup] = (),
        max_vcpu: str = "16 vCPU",
        max_memory: str = "64 GB",
        release_label: str = RELEASE_LABEL,
        architecture: str = ARCHITECTURE,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        super().__init__(scope, id)
        self.bucket = s3.Bucket(
            self, "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            removal_policy=removal_policy,
            auto_delete_objects=False,
            lifecycle_rules=[
                s3.LifecycleRule(prefix="logs/", expiration=Duration.days(30)),
                s3.LifecycleRule(noncurrent_version_expiration=Duration.days(7)),
            ],
        )

        network = None
        if vpc is not None:
            self.security_group = ec2.SecurityGroup(self, "SecurityGroup", vpc=vpc, allow_all_outbound=True,
                                                    description="EMR Serverless Spark aggregator")
            groups = [self.security_group, *security_groups]
            network = emr.CfnApplication.NetworkConfigurationProperty(
                subnet_ids=vpc.select_subnets(subnet_type=subnet_type).subnet_ids,
                security_group_ids=[g.security_group_id for g in groups],
            )
        self.application = emr.CfnApplication(
            self, "Application",
            release_label=release_label,
            architecture=architecture,
            type="SPARK",
            name=f"{id.lower()}-aggregator",
            auto_start_configuration=emr.CfnApplication.AutoStartConfigurationProperty(enabled=True),
            auto_stop_configuration=emr.CfnApplication.AutoStopConfigurationProperty(
                enabled=True, idle_timeout_minutes=15),
            maximum_capacity=emr.CfnApplication.MaximumAllowedResourcesProperty(cpu=max_vcpu, memory=max_memory),
            network_configuration=network,
        )

        self.job_role = iam.Role(
            self, "JobRole",
            assumed_by=iam.ServicePrincipal("emr-serverless.amazonaws.com").with_conditions({
                "StringEquals": {"aws:SourceAccount": self.application.stack.account},
                "ArnLike": {"aws:SourceArn": self.application.attr_arn},
            }),
            description="Consolidator Spark job on EMR Serverless: code, checkpoints, MSK topics, DLQ",
        )
        self.bucket.grant_read(self.job_role, "code/*")
        self.bucket.grant_read_write(self.job_role, "checkpoints/*")
        self.bucket.grant_put(self.job_role, "logs/*")
        self.job_role.add_to_policy(iam.PolicyStatement(
            actions=["kafka-cluster:Connect", "kafka-cluster:DescribeCluster"], resources=[msk_cluster_arn]))
        self.job_role.add_to_policy(iam.PolicyStatement(
            actions=["kafka-cluster:DescribeTopic", "kafka-cluster:ReadData"],
            resources=[_msk_arn(msk_cluster_arn, "topic", source_topic)]))
        self.job_role.add_to_policy(iam.PolicyStatement(
            actions=["kafka-cluster:DescribeTopic", "kafka-cluster:WriteData"],
            resources=[_msk_arn(msk_cluster_arn, "topic", output_topic)]))
        self.job_role.add_to_policy(iam.PolicyStatement(  # Spark's source and our reader use these
            actions=["kafka-cluster:AlterGroup", "kafka-cluster:DescribeGroup"],
            resources=[_msk_arn(msk_cluster_arn, "group", "spark-kafka-source-*"),
                       _msk_arn(msk_cluster_arn, "group", "consolidator-spark-*")]))
        if dead_letter_queue is not None:
            dead_letter_queue.grant_send_messages(self.job_role)

    @property
    def code_uri(self) -> str:
        return f"s3://{self.bucket.bucket_name}/code"


def attach(stack) -> SparkOnEmrServerless:
    """The stack's hook (``spark: true`` in an environment file): the Spark aggregator reads the
    ingest topic and writes to the Kafka sink topic of the same MSK cluster, in the stack's VPC."""
    from consolidator_infra.config_model import ConfigError
    from consolidator_infra.config_sink import KafkaSinkConfig

    config = stack.config
    if not isinstance(config.sink, KafkaSinkConfig):
        raise ConfigError(f"{config.name}: spark needs a kafka sink (the Spark job writes batches to Kafka)")
    spark = SparkOnEmrServerless(
        stack, "Spark",
        msk_cluster_arn=config.msk.cluster_arn,
        source_topic=config.msk.topic,
        output_topic=config.sink.topic,
        dead_letter_queue=stack.dead_letters.queue,
        vpc=stack.network.vpc,
    )
    NagSuppressions.add_resource_suppressions(spark.bucket, [NagPackSuppression(
        id="AwsSolutions-S1",
        reason="The bucket holds the job's code, checkpoints and logs, written only by the job role; "
               "CloudTrail records its API use. Access logs would add a second bucket for no reader.",
    )], apply_to_children=True)
    NagSuppressions.add_resource_suppressions(spark.job_role, [NagPackSuppression(
        id="AwsSolutions-IAM5",
        reason="Wildcards are bounded: object actions on the code/, checkpoints/ and logs/ prefixes of "
               "this application's own bucket (CDK grant action groups), and the MSK consumer groups "
               "whose names Spark generates under the spark-kafka-source-/consolidator-spark- prefixes.",
    )], apply_to_children=True)
    return spark
