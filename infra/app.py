"""The CDK app: one Stage per environment file in infra/environments/.

Synthesizes offline, without AWS credentials: ``python infra/app.py`` (or ``cdk synth``).
``CONSOLIDATOR_ENVIRONMENTS=dev,prod`` limits the environments; ``CDK_OUTDIR`` (set by the
CDK CLI) or ``cdk.out`` is the output directory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

INFRA = Path(__file__).resolve().parent
sys.path.insert(0, str(INFRA))
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")

from aws_cdk import App
from consolidator_infra.config import environment_names, load_environment
from consolidator_infra.stage import ConsolidatorStage

# Asset metadata lets `sam local invoke -t cdk.out/...` find each function's code.
CONTEXT = {"aws:cdk:enable-asset-metadata": True, "aws:cdk:enable-path-metadata": True}


def create_app(outdir: str | None = None, context: dict | None = None) -> App:
    return App(outdir=outdir or os.environ.get("CDK_OUTDIR") or str(INFRA.parent / "cdk.out"),
               context={**CONTEXT, **(context or {})})


def add_stages(app: App, names: list[str] | None = None) -> list[ConsolidatorStage]:
    """One ConsolidatorStage per environment: ``names``, else $CONSOLIDATOR_ENVIRONMENTS, else all."""
    selected = os.environ.get("CONSOLIDATOR_ENVIRONMENTS")
    names = names or (selected.split(",") if selected else environment_names())
    return [ConsolidatorStage(app, load_environment(name.strip())) for name in names]


def build_app() -> App:
    app = create_app()
    add_stages(app)
    return app


if __name__ == "__main__":
    build_app().synth()
