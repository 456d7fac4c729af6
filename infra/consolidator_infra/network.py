"""Network: the VPC (created or imported) and one security group per role, least access.

Ingress is opened only where two roles meet (functions -> database 3306, flush -> cache 6379)
by the stack; egress of the function groups is restricted to HTTPS (AWS APIs), the database,
the cache and the Kafka brokers, never "all traffic".
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from consolidator_infra.config import NetworkConfig

MYSQL_PORT = 3306
REDIS_PORT = 6379
KAFKA_IAM_PORT = 9098


class Network(Construct):
    def __init__(self, scope: Construct, id: str, *, config: NetworkConfig, removal_policy: RemovalPolicy) -> None:
        super().__init__(scope, id)
        if config.vpc_id:
            self.vpc = ec2.Vpc.from_vpc_attributes(
                self, "Vpc",
                vpc_id=config.vpc_id,
                vpc_cidr_block=config.vpc_cidr,
                availability_zones=config.availability_zones,
                private_subnet_ids=config.private_subnet_ids,
                isolated_subnet_ids=config.isolated_subnet_ids,
            )
        else:
            vpc = ec2.Vpc(
                self, "Vpc",
                ip_addresses=ec2.IpAddresses.cidr(config.vpc_cidr),
                availability_zones=config.availability_zones or None,
                max_azs=None if config.availability_zones else config.max_azs,
                nat_gateways=config.nat_gateways,
                subnet_configuration=[
                    ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                    ec2.SubnetConfiguration(
                        name="functions",
                        subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS if config.nat_gateways
                        else ec2.SubnetType.PRIVATE_ISOLATED,
                        cidr_mask=22,
                    ),
                    ec2.SubnetConfiguration(name="data", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=24),
                ],
                restrict_default_security_group=True,
            )
            flow_logs = logs.LogGroup(
                self, "FlowLogs",
                retention=retention_days(config.flow_log_retention_days),
                removal_policy=removal_policy,
            )
            vpc.add_flow_log("FlowLog", destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs))
            self.vpc = vpc
        if config.vpc_id:  # imported private subnets have egress, isolated ones hold the data
            self.function_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
            self.data_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
        else:
            self.function_subnets = ec2.SubnetSelection(subnet_group_name="functions")
            self.data_subnets = ec2.SubnetSelection(subnet_group_name="data")

        self.database_sg = self._group("Database", "Aurora MySQL: ingress from functions on 3306 only")
        self.cache_sg = self._group("Cache", "ElastiCache: ingress from the flush function on 6379 only")
        self.endpoint_sg: ec2.SecurityGroup | None = None
        if config.interface_endpoints:
            self.endpoint_sg = self._group("Endpoints", "VPC interface endpoints: HTTPS from the VPC")
            self.endpoint_sg.add_ingress_rule(ec2.Peer.ipv4(config.vpc_cidr), ec2.Port.tcp(443), "HTTPS from the VPC")
            for name, service in (
                ("SecretsManager", ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER),
                ("Sqs", ec2.InterfaceVpcEndpointAwsService.SQS),
            ):
                self.vpc.add_interface_endpoint(
                    name, service=service, subnets=self.function_subnets, security_groups=[self.endpoint_sg],
                    private_dns_enabled=True, open=False,  # ingress: the rule above
                )

    @property
    def data_subnet_ids(self) -> list[str]:
        if self.data_subnets.subnet_group_name:
            return self.vpc.select_subnets(subnet_group_name=self.data_subnets.subnet_group_name).subnet_ids
        return self.vpc.select_subnets(subnet_type=self.data_subnets.subnet_type).subnet_ids

    def _group(self, id: str, description: str) -> ec2.SecurityGroup:
        return ec2.SecurityGroup(self, f"{id}Sg", vpc=self.vpc, description=description, allow_all_outbound=False)

    def function_group(self, id: str, *, database: bool, cache: bool, kafka_cidr: str | None) -> ec2.SecurityGroup:
        """A function's group: egress HTTPS (AWS APIs), plus what it is allowed to reach."""
        group = self._group(id, f"{id} function: egress to what it uses only")
        group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to AWS APIs")
        if database:
            group.connections.allow_to(self.database_sg, ec2.Port.tcp(MYSQL_PORT), "MySQL")
        if cache:
            group.connections.allow_to(self.cache_sg, ec2.Port.tcp(REDIS_PORT), "Redis/Valkey TLS")
        if kafka_cidr:
            group.add_egress_rule(ec2.Peer.ipv4(kafka_cidr), ec2.Port.tcp(KAFKA_IAM_PORT), "MSK brokers (IAM)")
        return group


_RETENTIONS = {
    1: logs.RetentionDays.ONE_DAY, 3: logs.RetentionDays.THREE_DAYS, 5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK, 14: logs.RetentionDays.TWO_WEEKS, 30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS, 90: logs.RetentionDays.THREE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS, 365: logs.RetentionDays.ONE_YEAR,
    731: logs.RetentionDays.TWO_YEARS, 3653: logs.RetentionDays.TEN_YEARS,
}


def retention_days(days: int) -> logs.RetentionDays:
    """The smallest CloudWatch retention that keeps at least ``days`` days."""
    for value in sorted(_RETENTIONS):
        if value >= days:
            return _RETENTIONS[value]
    return logs.RetentionDays.TEN_YEARS


__all__ = ["KAFKA_IAM_PORT", "MYSQL_PORT", "REDIS_PORT", "Network", "retention_days"]
