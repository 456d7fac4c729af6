"""The Docker-free bundler: cache keys and the no-Spark/no-CDK guard (no network needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "infra"))

import bundle

pytestmark = pytest.mark.infra


def test_runtime_dependencies_are_the_project_dependencies_only():
    dependencies = bundle.runtime_dependencies()
    names = " ".join(dependencies)
    assert "pydantic" in names and "pymysql" in names
    for extra in ("pyspark", "aws-cdk-lib", "cdk-nag", "typer", "pytest"):
        assert extra not in names


def test_check_bundle_refuses_spark_and_cdk(tmp_path):
    (tmp_path / "handler.py").write_text("")
    bundle.check_bundle(tmp_path)
    (tmp_path / "pyspark").mkdir()
    with pytest.raises(bundle.BundleError, match="pyspark"):
        bundle.check_bundle(tmp_path)


def test_code_hash_differs_per_function_and_ignores_spark_sources():
    assert bundle.code_hash("ingest") != bundle.code_hash("flush")
    assert bundle.code_hash("ingest") == bundle.code_hash("ingest")
    sources = [p.relative_to(bundle.REPO).as_posix() for p in bundle._tree(bundle.REPO / "src" / "consolidator")]
    assert sources and not any("/spark/" in s or "__pycache__" in s for s in sources)


def test_missing_handler_is_a_clear_error():
    with pytest.raises(bundle.BundleError, match="functions/nope/handler.py does not exist"):
        bundle.function_bundle("nope")
