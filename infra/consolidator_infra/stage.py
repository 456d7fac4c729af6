"""One Stage per environment: the Consolidator stack, tagged, checked by cdk-nag."""

from __future__ import annotations

from aws_cdk import Aspects, Environment, Stage, Tags
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from consolidator_infra.config import EnvironmentConfig
from consolidator_infra.stack import ConsolidatorStack


class ConsolidatorStage(Stage):
    def __init__(self, scope: Construct, config: EnvironmentConfig) -> None:
        env = Environment(account=config.account, region=config.region) if config.account else None
        super().__init__(scope, config.stage_id, env=env)
        self.config = config
        self.stack = ConsolidatorStack(self, "Consolidator", config=config, stack_name=f"consolidator-{config.name}")
        for key, value in config.tags.items():
            Tags.of(self.stack).add(key, value)
        Aspects.of(self).add(AwsSolutionsChecks(verbose=True))
