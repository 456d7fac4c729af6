"""Synthesize every environment once per test session (synth is slow: share it)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "infra"))
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "18,20")  # a list of majors
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")

pytest.importorskip("aws_cdk", reason="infra extra not installed")

ENVIRONMENTS = ("dev", "staging", "prod")


@dataclass
class Synthesized:
    stack: object  # ConsolidatorStack
    template: object  # aws_cdk.assertions.Template
    template_path: Path

    @property
    def config(self):
        return self.stack.config

    def resources(self, type_: str) -> dict[str, dict]:
        return self.template.find_resources(type_)

    def logical_id(self, construct) -> str:
        return self.stack.resolve(construct.node.default_child.logical_id)


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory) -> dict[str, Synthesized]:
    from app import add_stages, create_app
    from aws_cdk.assertions import Template

    outdir = tmp_path_factory.mktemp("cdk.out")
    app = create_app(outdir=str(outdir))
    stages = add_stages(app, list(ENVIRONMENTS))
    assembly = app.synth()
    result = {}
    for stage in stages:
        stack = stage.stack
        artifact = assembly.get_nested_assembly(stage.artifact_id).get_stack_artifact(stack.artifact_id)
        result[stage.config.name] = Synthesized(
            stack=stack,
            template=Template.from_json(artifact.template),
            template_path=Path(artifact.template_full_path),
        )
    assert sorted(result) == sorted(ENVIRONMENTS)
    return result


@pytest.fixture(params=ENVIRONMENTS)
def env(request, synthesized) -> Synthesized:
    return synthesized[request.param]
