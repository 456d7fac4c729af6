"""Bundle the Lambda code locally, without Docker.

One directory per function, each holding:

* the runtime dependencies of ``pyproject.toml``'s ``[project.dependencies]`` as manylinux
  wheels for arm64 / CPython 3.12 (``pip install --platform ... --only-binary=:all:``), minus
  boto3/botocore/s3transfer which the Lambda runtime provides;
* the ``consolidator`` package from ``src/`` without ``spark/`` (no Spark, no CDK);
* ``functions/<name>/handler.py`` at the root, so the Lambda handler is ``handler.handler``.

Dependencies are installed once into ``build/lambda/_dependencies-<hash>/`` (hash of
pyproject.toml and this file) and hard-linked into ``build/lambda/<name>-<hash>/`` (hash of
everything in that bundle). Synth, tests and ``sam`` reuse the cache and need no network once
it exists.

Usage: ``python infra/bundle.py [ingest flush ...]`` prints the directory of each function.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build" / "lambda"
PYTHON_VERSION = "3.12"
PLATFORMS = (  # Lambda python3.12 runs on Amazon Linux 2023 (glibc 2.34), arm64
    "manylinux2014_aarch64",
    "manylinux_2_28_aarch64",
    "manylinux_2_34_aarch64",
)
# Provided by the Lambda Python runtime; dropped from the bundle to keep it small.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer")
# Never allowed in a function bundle.
FORBIDDEN = ("pyspark", "aws_cdk", "constructs", "jsii", "cdk_nag")
EXCLUDED_SOURCE = ("spark", "__pycache__")


class BundleError(RuntimeError):
    """The bundle could not be built (pip failed, a handler is missing, a forbidden package)."""


def runtime_dependencies(pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    return list(tomllib.loads(pyproject.read_text())["project"]["dependencies"])


def _hash_files(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(REPO)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _tree(root: Path) -> list[Path]:
    return [
        path for path in sorted(root.rglob("*"))
        if path.is_file() and not set(path.relative_to(root).parts) & set(EXCLUDED_SOURCE)
        and path.suffix != ".pyc"
    ]


def dependencies_hash() -> str:
    """Changes when the runtime dependencies (pyproject.toml) or this bundler change."""
    return _hash_files([REPO / "pyproject.toml", Path(__file__).resolve()])


def code_hash(name: str) -> str:
    """Hash of everything in function ``name``'s bundle: dependencies, package and handler."""
    files = [REPO / "pyproject.toml", Path(__file__).resolve(), *_tree(REPO / "src" / "consolidator")]
    return _hash_files([*files, REPO / "functions" / name / "handler.py"])


def _install_dependencies(target: Path) -> None:
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "--target", str(target), "--implementation", "cp", "--python-version", PYTHON_VERSION,
        "--only-binary=:all:", "--upgrade",
    ]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    command += runtime_dependencies()
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BundleError(f"pip could not install the runtime dependencies:\n{result.stderr[-4000:]}")
    for name in RUNTIME_PROVIDED:
        shutil.rmtree(target / name, ignore_errors=True)
        for info in target.glob(f"{name}-*.dist-info"):
            shutil.rmtree(info)
    shutil.rmtree(target / "bin", ignore_errors=True)
    for cache in target.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)


def _link_tree(source: Path, target: Path) -> None:
    """Hard-link ``source`` into ``target`` (copy where links are not possible)."""
    for path in source.rglob("*"):
        destination = target / path.relative_to(source)
        if path.is_dir():
            destination.mkdir(parents=True, exist_ok=True)
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, destination)
        except OSError:
            shutil.copy2(path, destination)


def _copy_package(target: Path) -> None:
    shutil.copytree(
        REPO / "src" / "consolidator",
        target / "consolidator",
        ignore=shutil.ignore_patterns(*EXCLUDED_SOURCE, "*.pyc"),
    )


def check_bundle(directory: Path) -> None:
    """Raise if a forbidden package (Spark, CDK) is in the bundle."""
    found = [name for name in FORBIDDEN if (directory / name).exists()]
    if found:
        raise BundleError(f"{directory} contains forbidden packages: {', '.join(found)}")


def _cached_build(directory: Path, build, stale_pattern: str) -> Path:
    """``directory`` built once: ``build(staging)`` fills a staging directory that is renamed
    into place only when complete; older builds matching ``stale_pattern`` are removed."""
    if (directory / ".complete").exists():
        return directory
    staging = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    build(staging)
    shutil.rmtree(directory, ignore_errors=True)
    for stale in BUILD.glob(stale_pattern):
        if stale != staging:
            shutil.rmtree(stale, ignore_errors=True)
    staging.rename(directory)
    (directory / ".complete").touch()
    return directory


def _dependencies() -> Path:
    return _cached_build(BUILD / f"_dependencies-{dependencies_hash()}", _install_dependencies,
                         "_dependencies-*")


def function_bundle(name: str) -> Path:
    """The bundle directory of function ``name`` (built on first use, cached by content hash)."""
    handler = REPO / "functions" / name / "handler.py"
    if not handler.is_file():
        raise BundleError(f"functions/{name}/handler.py does not exist")
    directory = BUILD / f"{name}-{code_hash(name)}"
    if (directory / ".complete").exists():
        return directory
    dependencies = _dependencies()

    def build(staging: Path) -> None:
        _link_tree(dependencies, staging)
        (staging / ".complete").unlink()
        _copy_package(staging)
        shutil.copy2(handler, staging / "handler.py")
        check_bundle(staging)

    return _cached_build(directory, build, f"{name}-*")  # older builds of this function


def directory_size(directory: Path) -> int:
    """Unzipped size in bytes (what counts against Lambda's 250 MB limit)."""
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def main(argv: list[str]) -> int:
    names = argv or sorted(p.parent.name for p in (REPO / "functions").glob("*/handler.py"))
    for name in names:
        directory = function_bundle(name)
        print(f"{name}\t{directory_size(directory) / 1e6:.1f} MB\t{directory.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
