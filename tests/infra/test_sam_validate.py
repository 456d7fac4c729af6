"""``sam validate --lint`` (the SAM CLI of .tools/sam, infra/sam_local.py) on every synthesized
environment, and a template with a broken function that fails it."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.infra, pytest.mark.sam]


def test_every_synthesized_template_passes_sam_validate_lint(synthesized):
    import sam_local

    regions = {env.config.region for env in synthesized.values()}
    assert len(regions) == 1, regions  # one lint region for all (else lint per region)
    failed = sam_local.lint_all([env.template_path for env in synthesized.values()], region=regions.pop())
    assert failed == {}, "\n".join(failed.values())


def test_a_function_with_an_unknown_runtime_fails_the_lint(synthesized, tmp_path):
    import sam_local

    env = synthesized["dev"]
    template = json.loads(env.template_path.read_text())
    ingest = env.logical_id(env.stack.ingest)
    template["Resources"][ingest]["Properties"]["Runtime"] = "python2.9"
    broken = tmp_path / env.template_path.name
    broken.write_text(json.dumps(template))
    report = sam_local.lint(broken, region=env.config.region)
    assert report is not None and "E3030" in report and "python2.9" in report, report
