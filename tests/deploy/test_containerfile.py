"""The Containerfile and its build context, read statically (`make container-check` builds and
runs the image): only runtime dependencies from uv.lock, a non-root user, the worker entry point
with a health check, no settings or credentials baked in, and a context that holds only what the
build copies."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib

from tests.deploy.manifests import (
    CONTAINERFILE,
    IGNOREFILE,
    REPO,
    env_of,
    final_stage,
    instructions,
)


def _included(path: str, patterns: list[str]) -> bool:
    """Whether ``path`` reaches the build context under ``patterns`` (.dockerignore rules: the
    last pattern matching the path or one of its parent folders decides; ``!`` re-includes)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    included = True
    for pattern in patterns:
        negated = pattern.startswith("!")
        body = pattern.removeprefix("!").rstrip("/")
        if body.startswith("**/"):
            hit = any(fnmatch.fnmatchcase(part, body[3:]) for part in parts)
        else:
            hit = any(fnmatch.fnmatchcase(prefix, body) for prefix in prefixes)
        if hit:
            included = negated
    return included


def _ignore_patterns() -> list[str]:
    return [line.strip() for line in IGNOREFILE.read_text().splitlines() if line.strip() and not line.startswith("#")]


def test_the_build_context_holds_what_the_containerfile_copies_and_nothing_else():
    patterns = _ignore_patterns()
    copied = [word for keyword, rest in instructions(CONTAINERFILE.read_text()) if keyword == "COPY"
              and not rest.startswith("--from") for word in shlex.split(rest)[:-1]]
    assert copied, "the Containerfile copies nothing from the context"
    for source in copied:
        assert (REPO / source).exists(), source
        assert _included(source.rstrip("/") + ("/consolidator/__init__.py" if source.startswith("src") else ""),
                         patterns), f"{source} is copied but excluded by .dockerignore"
    for private in (".env", ".venv/bin/python", ".tools/venv/bin/uv", ".git/config", "build/container/base.tar",
                    "cdk.out/manifest.json", "tests/conftest.py", "src/consolidator/__pycache__/x.pyc",
                    "deploy/kubernetes/secret-example/secret.yaml", "id_rsa", ".aws/credentials"):
        assert not _included(private, patterns), f"{private} would reach the build context"


def test_the_image_installs_only_runtime_dependencies_from_the_lock():
    runtime_extras = {"cli"}
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert runtime_extras <= set(extras)
    steps = instructions(CONTAINERFILE.read_text())
    syncs = [rest for keyword, rest in steps if keyword == "RUN" for rest in rest.split("&&") if "uv sync" in rest]
    assert syncs, "no uv sync in the Containerfile"
    for sync in syncs:
        words = shlex.split(sync)
        assert "--frozen" in words and "--no-dev" in words, sync
        chosen = {words[i + 1] for i, word in enumerate(words) if word == "--extra"}
        assert chosen == runtime_extras, sync
        assert "--all-extras" not in words, sync
    installs = [rest for keyword, rest in steps if keyword == "RUN" and "pip install" in rest]
    assert all("--require-hashes -r /tmp/uv-requirements.txt" in rest for rest in installs), installs


def test_the_image_runs_the_worker_as_a_non_root_user_with_a_health_check():
    image = final_stage(CONTAINERFILE.read_text())
    keywords = [keyword for keyword, _ in image]
    entrypoint = next(rest for keyword, rest in image if keyword == "ENTRYPOINT")
    assert json.loads(entrypoint) == ["consolidator", "worker"]
    user = next(rest for keyword, rest in image if keyword == "USER")
    assert re.fullmatch(r"[1-9][0-9]*:[1-9][0-9]*", user), "a numeric non-root uid:gid (runAsNonRoot checks it)"
    assert keywords.index("USER") > max(i for i, k in enumerate(keywords) if k in ("RUN", "COPY"))
    assert "HEALTHCHECK" in keywords and "CMD" not in keywords


def test_no_setting_or_credential_is_baked_in():
    for keyword, rest in instructions(CONTAINERFILE.read_text()):
        if keyword == "ARG":
            assert not re.search(r"(?i)password|secret|token|_url", rest), rest
    settings = {k for k in env_of(instructions(CONTAINERFILE.read_text())) if k.startswith("CONSOLIDATOR_")}
    assert settings == {"CONSOLIDATOR_WORKER_HTTP_PORT"}


def test_the_default_base_is_the_official_slim_python_the_project_supports():
    base = next(rest for keyword, rest in instructions(CONTAINERFILE.read_text())
                if keyword == "ARG" and rest.startswith("BASE_IMAGE="))
    version = re.fullmatch(r"BASE_IMAGE=docker\.io/library/python:(\d+\.\d+)-slim(-\w+)?", base)
    assert version, base
    floor = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert floor == f">={version.group(1)}"
    assert all(rest == "${BASE_IMAGE}" or rest.startswith("${BASE_IMAGE} AS ")
               for keyword, rest in instructions(CONTAINERFILE.read_text()) if keyword == "FROM")
