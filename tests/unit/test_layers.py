"""The layering contracts of pyproject.toml ([tool.importlinter], run by `make test` and `make
lint`) hold, and break on what they exist to catch: an upward import, an import circle, and a
pipeline module importing the consumer helpers. Checked on a copy of the packages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "src" / "consolidator", tmp_path / "consolidator",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "infra" / "consolidator_infra", tmp_path / "consolidator_infra",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def lint(copy: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-logo", "--no-cache"], check=False, cwd=copy,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(copy)}, timeout=300)


def add_import(copy: Path, module: str, statement: str) -> None:
    path = copy / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n{statement}  # added by the test\n")


def test_the_contracts_hold(copy):
    result = lint(copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(("module", "statement", "broken"), [
    ("consolidator.store.rate", "from consolidator.services import ingest",
     "consolidator.store is not allowed to import consolidator.services"),
    ("consolidator.rules.policy", "from consolidator.store import rate",
     "consolidator.rules is not allowed to import consolidator.store"),
    ("consolidator.rules.shape", "from consolidator.rules import batch",
     "consolidator.rules.shape is not allowed to import consolidator.rules.batch"),
    ("consolidator.spark.transforms", "from consolidator.spark import packing", "No cycles are allowed in consolidator.spark"),
    ("consolidator_infra.nag", "from consolidator_infra import stack", "No cycles are allowed in consolidator_infra"),
    ("consolidator.services.flush", "from consolidator.consumer import dedupe", "consolidator.consumer"),
])
def test_a_forbidden_import_breaks_a_contract(copy, module, statement, broken):
    add_import(copy, module, statement)
    result = lint(copy)
    assert result.returncode == 1, result.stdout + result.stderr
    assert broken in result.stdout, result.stdout
