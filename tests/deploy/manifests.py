"""Readers for the deployment files the tests of this folder check: the Kubernetes manifests
(deploy/kubernetes/, the Secret example included) and the Containerfile's instructions."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
KUBERNETES = REPO / "deploy" / "kubernetes"
CONTAINERFILE = REPO / "Containerfile"
IGNOREFILE = REPO / ".dockerignore"


def manifest_files() -> list[Path]:
    """Every manifest: the applied folder and the Secret example beside it."""
    return sorted(KUBERNETES.rglob("*.yaml"))


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def by_kind() -> dict[str, dict]:
    """The one document of each kind (the tests rely on there being one of each)."""
    found: dict[str, dict] = {}
    for path in manifest_files():
        for document in documents(path):
            assert document["kind"] not in found, f"two {document['kind']} documents ({path.name})"
            found[document["kind"]] = document
    return found


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Containerfile, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    result = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def final_stage(text: str) -> list[tuple[str, str]]:
    """The instructions of the last stage (the image that runs)."""
    steps = instructions(text)
    last_from = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    return steps[last_from:]


def env_of(steps: list[tuple[str, str]]) -> dict[str, str]:
    """The ENV values set by ``steps`` (the ``KEY=value`` form)."""
    values: dict[str, str] = {}
    for keyword, rest in steps:
        if keyword == "ENV":
            values.update(word.split("=", 1) for word in shlex.split(rest))
    return values
