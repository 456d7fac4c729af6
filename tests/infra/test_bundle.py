"""The Docker-free bundler: locked versions, cache keys, the no-Spark/no-CDK guard, and no
download at test time (the wheels come from the set-up)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "infra"))

import bundle

pytestmark = pytest.mark.infra


def _pins(requirements: str) -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^ ;\\]+)", requirements, flags=re.MULTILINE))


def test_runtime_requirements_are_the_locked_runtime_closure_with_hashes():
    requirements = bundle.runtime_requirements()
    pins = _pins(requirements)
    assert {"pydantic", "pydantic-core", "pymysql", "orjson", "confluent-kafka"} <= set(pins)
    for extra in ("pyspark", "aws-cdk-lib", "constructs", "cdk-nag", "typer", "pytest", "pandas"):
        assert extra not in pins, extra
    lock = tomllib.loads((bundle.REPO / "uv.lock").read_text())
    locked = {p["name"]: p["version"] for p in lock["package"]}
    assert {name: locked[name] for name in pins} == pins  # exactly the versions of uv.lock
    # every requirement carries its sha256 (uv then installs with --require-hashes)
    entries = re.split(r"\n(?=\S)", requirements.strip())
    assert len(entries) == len(pins) and all("--hash=sha256:" in e for e in entries)


def test_asset_hash_changes_when_a_locked_version_changes(monkeypatch):
    requirements = bundle.runtime_requirements()
    before = (bundle.dependencies_hash(requirements), bundle.code_hash("ingest"))
    bumped = re.sub(r"^pymysql==\S+", "pymysql==0.0.1", requirements, flags=re.MULTILINE)
    assert bumped != requirements
    monkeypatch.setattr(bundle, "runtime_requirements", lambda: bumped)
    assert bundle.dependencies_hash(bumped) != before[0]
    assert bundle.code_hash("ingest") != before[1]


def test_offline_build_never_downloads(tmp_path, monkeypatch):
    """At test time the bundler installs only what the set-up fetched: with an empty uv cache
    it fails and says to run the set-up, instead of reaching the package index."""
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(bundle, "BUILD", tmp_path / "build")
    with pytest.raises(bundle.BundleError, match=r"scripts/setup\.sh test"):
        bundle.dependencies()
    assert not list((tmp_path / "build").glob("_dependencies-*/.complete"))


def test_check_bundle_refuses_spark_and_cdk(tmp_path):
    (tmp_path / "handler.py").write_text("")
    bundle.check_bundle(tmp_path)
    (tmp_path / "pyspark").mkdir()
    with pytest.raises(bundle.BundleError, match="pyspark"):
        bundle.check_bundle(tmp_path)


def test_code_hash_differs_per_function_and_ignores_what_functions_do_not_import():
    assert bundle.code_hash("ingest") != bundle.code_hash("flush")
    assert bundle.code_hash("ingest") == bundle.code_hash("ingest")
    sources = [p.relative_to(bundle.REPO / "src").as_posix() for p in bundle._tree(bundle.REPO / "src" / "consolidator")]
    assert sources and not any(s.startswith(("consolidator/spark/", "consolidator/cli/", "consolidator/demo/"))
                               or "__pycache__" in s for s in sources)


@pytest.mark.parametrize("name", sorted(p.parent.name for p in (bundle.REPO / "functions").glob("*/handler.py")))
def test_a_handler_imports_only_what_the_bundle_ships(name):
    """Importing the handler (and building what it builds at import) loads no part of the package
    that ``FUNCTION_PACKAGES`` leaves out of the bundle."""
    probe = ("import importlib.util, json, sys\n"
             f"spec = importlib.util.spec_from_file_location('handler', {str(bundle.REPO / 'functions' / name / 'handler.py')!r})\n"
             "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith('consolidator.'))))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            env={**os.environ, "AWS_DEFAULT_REGION": "eu-west-1", "POWERTOOLS_TRACE_DISABLED": "1"})
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded, result.stderr
    outside = [m for m in loaded if m.split(".")[1] not in {p.removesuffix(".py") for p in bundle.FUNCTION_PACKAGES}]
    assert not outside, f"functions/{name}/handler.py imports {outside}, which the bundle does not ship"


def test_missing_handler_is_a_clear_error():
    with pytest.raises(bundle.BundleError, match="functions/nope/handler.py does not exist"):
        bundle.function_bundle("nope")
