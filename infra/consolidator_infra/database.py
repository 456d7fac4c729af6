"""Database: Aurora MySQL 3 Serverless v2, private subnets only, encrypted, TLS required.

The admin (master) credentials live in Secrets Manager and rotate on a schedule (single-user
rotation Lambda in the function subnets); only the migrate function reads them. Every other
function has its own database user and secret (:meth:`Database.add_user`): the migration creates
the user with that secret's password and the grants of ``consolidator.store.users.GRANTS``, and
the secret rotates on the same schedule (single-user rotation: the user changes its own password,
so no rotation Lambda but the master's holds the master password). Functions read their secret at
start-up (``CONSOLIDATOR_DATABASE_SECRET_ARN``) and always connect with TLS.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_rds as rds
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from consolidator_infra.config import DatabaseConfig
from consolidator_infra.network import Network, retention_days


class Database(Construct):
    def __init__(
        self, scope: Construct, id: str, *, config: DatabaseConfig, network: Network,
        removal_policy: RemovalPolicy, log_retention_days: int,
    ) -> None:
        super().__init__(scope, id)
        self._config = config
        self._network = network
        self.users: dict[str, secretsmanager.ISecret] = {}  # role -> its secret (host, port, dbname attached)
        self.user_rotations: list[secretsmanager.RotationSchedule] = []  # after the migration
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


    def add_user(self, role: str) -> secretsmanager.ISecret:
        """The secret of the function ``role``'s own database user ``consolidator_<role>``
        (RDS format, the cluster's host, port and database attached), rotated like the master's.
        The user and its grants are made by the migration, which must run before the first
        rotation: the stack makes each rotation depend on the migration trigger."""
        secret = rds.DatabaseSecret(
            self, f"{role.capitalize()}UserSecret", username=f"consolidator_{role}",
            dbname=self._config.database_name,
        ).attach(self.cluster)
        self.users[role] = secret
        secretsmanager.SecretRotation(
            self, f"{role.capitalize()}UserRotation",
            application=secretsmanager.SecretRotationApplication.MYSQL_ROTATION_SINGLE_USER,
            secret=secret, target=self.cluster, vpc=self._network.vpc,
            vpc_subnets=self._network.function_subnets,
            automatically_after=Duration.days(self._config.rotation_days),
        )
        self.user_rotations.append(secret.node.find_child("RotationSchedule"))
        return secret
