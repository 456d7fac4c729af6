"""Cache: ElastiCache (Valkey or Redis OSS) for the flush lock only.

In-transit encryption is required (``rediss://``) and AUTH is on, with the token generated
into Secrets Manager; the flush function reads it at start-up
(``CONSOLIDATOR_REDIS_AUTH_SECRET_ARN``). Encrypted at rest; isolated subnets; reachable from
the flush function's security group only.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy, Token
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from consolidator_infra.config import CacheConfig
from consolidator_infra.network import REDIS_PORT, Network


class Cache(Construct):
    def __init__(self, scope: Construct, id: str, *, config: CacheConfig, network: Network, removal_policy: RemovalPolicy) -> None:
        super().__init__(scope, id)
        self.auth_secret = secretsmanager.Secret(
            self, "AuthToken",
            description="AUTH token of the Consolidator cache (flush lock)",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=64, exclude_punctuation=True, include_space=False,
            ),
            removal_policy=removal_policy,
        )
        subnets = elasticache.CfnSubnetGroup(
            self, "Subnets",
            description="Consolidator cache: isolated subnets",
            subnet_ids=network.data_subnet_ids,
        )
        multi_az = config.replicas > 0
        self.group = elasticache.CfnReplicationGroup(
            self, "ReplicationGroup",
            replication_group_description="Consolidator flush lock",
            engine=config.engine,
            engine_version=config.engine_version,
            cache_node_type=config.node_type,
            num_cache_clusters=1 + config.replicas,
            automatic_failover_enabled=multi_az,
            multi_az_enabled=multi_az,
            port=REDIS_PORT,
            transit_encryption_enabled=True,
            transit_encryption_mode="required",
            at_rest_encryption_enabled=True,
            auth_token=self.auth_secret.secret_value.unsafe_unwrap(),  # a dynamic reference, never plain text
            cache_subnet_group_name=subnets.ref,
            security_group_ids=[network.cache_sg.security_group_id],
            snapshot_retention_limit=1 if multi_az else 0,
        )
        self.group.add_resource_dependency(subnets)
        self.group.apply_removal_policy(removal_policy)

    @property
    def url(self) -> str:
        """``rediss://<primary endpoint>:<port>/0`` (the token comes from the secret)."""
        return (
            f"rediss://{self.group.attr_primary_end_point_address}:"
            f"{Token.as_string(self.group.attr_primary_end_point_port)}/0"
        )
