"""Database: Aurora MySQL 3 Serverless v2, private subnets only, encrypted, TLS required.

The admin credentials live in Secrets Manager and rotate on a schedule (single-user rotation
Lambda in the function subnets). Functions read the secret at start-up
(``CONSOLIDATOR_DATABASE_SECRET_ARN``) and always connect with TLS.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_rds as rds
from constructs import Construct

from consolidator_infra.config import DatabaseConfig
from consolidator_infra.network import Network, retention_days


class Database(Construct):
    def __init__(
        self, scope: Construct, id: str, *, config: DatabaseConfig, network: Network,
        removal_policy: RemovalPolicy, log_retention_days: int,
    ) -> None:
        super().__init__(scope, id)
        engine = rds.DatabaseClusterEngine.aurora_mysql(
            version=rds.AuroraMysqlEngineVersion.of(f"8.0.mysql_aurora.{config.engine_version}", "8.0")
        )
        parameters = rds.ParameterGroup(
            self, "Parameters",
            engine=engine,
            description="Consolidator: TLS only, audit log on",
            parameters={
                "require_secure_transport": "ON",
                "tls_version": "TLSv1.2,TLSv1.3",
                "server_audit_logging": "1",
                "server_audit_events": "CONNECT,QUERY_DCL,QUERY_DDL",
            },
        )
        self.cluster = rds.DatabaseCluster(
            self, "Cluster",
            engine=engine,
            credentials=rds.Credentials.from_generated_secret("consolidator_admin"),
            default_database_name=config.database_name,
            writer=rds.ClusterInstance.serverless_v2("Writer", publicly_accessible=False),
            readers=[
                rds.ClusterInstance.serverless_v2(f"Reader{i + 1}", scale_with_writer=True, publicly_accessible=False)
                for i in range(config.readers)
            ],
            serverless_v2_min_capacity=config.min_capacity,
            serverless_v2_max_capacity=config.max_capacity,
            vpc=network.vpc,
            vpc_subnets=network.data_subnets,
            security_groups=[network.database_sg],
            storage_encrypted=True,
            parameter_group=parameters,
            iam_authentication=True,
            deletion_protection=config.deletion_protection,
            backup=rds.BackupProps(retention=Duration.days(config.backup_retention_days)),
            cloudwatch_logs_exports=["audit", "error", "slowquery"],
            cloudwatch_logs_retention=retention_days(log_retention_days),
            removal_policy=RemovalPolicy.SNAPSHOT if removal_policy == RemovalPolicy.RETAIN else removal_policy,
        )
        self.secret = self.cluster.secret
        self.rotation = self.cluster.add_rotation_single_user(
            automatically_after=Duration.days(config.rotation_days),
            vpc_subnets=network.function_subnets,
        )

