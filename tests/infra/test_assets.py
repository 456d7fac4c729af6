"""Lambda assets: what is inside, how big, and that SAM / cfn-lint can use the templates."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.infra

# target; Lambda's hard limit is 250 MB unzipped. The registry formats brought it from
# about 30 to 66 MB: fastavro (14 MB) and cryptography (14 MB, the Confluent registry client's auth)
LIMIT_BYTES = 80 * 1024 * 1024


def _asset_dir(env, function) -> Path:
    resources = env.template.to_json()["Resources"]
    metadata = resources[env.logical_id(function)]["Metadata"]
    assert metadata["aws:asset:property"] == "Code"
    return (env.template_path.parent / metadata["aws:asset:path"]).resolve()


def test_ingest_asset_has_no_spark_or_cdk_and_is_small(synthesized, record_property, capsys):
    env = synthesized["dev"]
    directory = _asset_dir(env, env.stack.ingest)
    assert (directory / "handler.py").is_file()
    assert (directory / "consolidator" / "services" / "ingest.py").is_file()
    assert (directory / "pydantic_core").is_dir() and (directory / "pymysql").is_dir()
    native = list((directory / "pydantic_core").glob("_pydantic_core*.so"))
    assert native and all("aarch64" in p.name for p in native)
    names = {p.name for p in directory.iterdir()}
    for forbidden in ("pyspark", "aws_cdk", "constructs", "jsii", "cdk_nag", "boto3", "botocore"):
        assert forbidden not in names, forbidden
    assert not (directory / "consolidator" / "spark").exists()
    size = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
    record_property("ingest_asset_unzipped_bytes", size)
    with capsys.disabled():
        print(f"\ningest asset unzipped: {size / 1e6:.1f} MB ({directory.name})")
    assert size < LIMIT_BYTES


def test_every_function_has_asset_metadata_for_sam(env):
    for function in (env.stack.ingest, env.stack.flush, env.stack.cleanup, env.stack.migrate):
        directory = _asset_dir(env, function)
        assert (directory / "handler.py").is_file()
        handler = (directory / "handler.py").read_text()
        name = function.node.id.lower()
        assert (Path(__file__).resolve().parents[2] / "functions" / name / "handler.py").read_text() == handler


def test_templates_pass_cfn_lint(synthesized):
    cfn_lint = shutil.which("cfn-lint", path=str(Path(sys.executable).parent))
    if cfn_lint is None:
        pytest.skip("cfn-lint not installed (infra extra)")
    templates = [str(env.template_path) for env in synthesized.values()]
    # W3005: CDK emits DependsOn next to a Ref/GetAtt on purpose; harmless.
    result = subprocess.run([cfn_lint, "--ignore-checks", "W3005", "--", *templates],
                            check=False, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_sam_events_exist():
    events = Path(__file__).resolve().parents[2] / "events"
    for name in ("scheduled-flush.json", "scheduled-cleanup.json"):
        event = json.loads((events / name).read_text())
        assert event["detail-type"] == "Scheduled Event" and event["source"] == "aws.events"
    msk = [json.loads(p.read_text()) for p in events.glob("msk*.json")]
    assert msk and all(e["eventSource"] == "aws:kafka" for e in msk)
