"""Bundle the Lambda code locally, without Docker.

One directory per function, each holding:

* the runtime dependencies (``[project.dependencies]``, no extras) at the exact versions of
  ``uv.lock``, as manylinux wheels for arm64 / CPython 3.12, hashes checked
  (``uv export`` of the lock, then ``uv pip install --target --python-platform
  --require-hashes --only-binary :all:``), minus boto3/botocore/s3transfer which the Lambda
  runtime provides;
* the parts of the ``consolidator`` package the functions import (``FUNCTION_PACKAGES``: no CLI,
  no demo, no Spark, no worker; ``tests/infra/test_bundle.py`` checks that every handler imports
  nothing else);
* ``functions/<name>/handler.py`` at the root, so the Lambda handler is ``handler.handler``.

Dependencies are installed once into ``build/lambda/_dependencies-<hash>/`` and hard-linked into
``build/lambda/<name>-<hash>/``. The dependencies hash covers the exported lock (versions and
hashes) and this file, so the asset hash of every function changes when a locked version does.

Only set-up downloads (``python infra/bundle.py --fetch``, run by ``scripts/setup.sh test``).
Everything else (synth, tests, ``sam``) builds with ``uv --offline``: from the dependencies
directory, else from uv's cache, else it fails and says to run the set-up.

Usage: ``python infra/bundle.py [--fetch] [ingest flush ...]`` prints the directory of each function.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build" / "lambda"
PYTHON_VERSION = "3.12"
# Lambda python3.12 runs on Amazon Linux 2023 (glibc 2.34), arm64: any manylinux wheel up to 2.34.
PLATFORM = "aarch64-manylinux_2_34"
# Provided by the Lambda Python runtime; dropped from the bundle to keep it small.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer")
# Never allowed in a function bundle.
FORBIDDEN = ("pyspark", "aws_cdk", "constructs", "jsii", "cdk_nag")
# The parts of src/consolidator/ a function imports: the rules, settings, adapters and use cases.
FUNCTION_PACKAGES = ("__init__.py", "rules", "settings", "sources", "support", "store", "sinks", "services",
                     "schemas")
EXCLUDED_SOURCE = ("__pycache__",)


class BundleError(RuntimeError):
    """The bundle could not be built (no uv, no lock, uv failed, a handler is missing, a
    forbidden package)."""


def uv_command() -> str:
    """The uv binary: ``$UV``, the one set-up installed (``.tools/venv/bin/uv``), or ``uv`` on PATH."""
    for candidate in (os.environ.get("UV"), str(REPO / ".tools" / "venv" / "bin" / "uv"), shutil.which("uv")):
        if candidate and Path(candidate).is_file():
            return candidate
    raise BundleError("uv not found: run `bash scripts/setup.sh` (it installs uv into .tools/)")


def _uv(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([uv_command(), *args], cwd=REPO, capture_output=True, text=True, check=False)


def runtime_requirements() -> str:
    """The runtime dependencies pinned by ``uv.lock``: ``name==version`` with their hashes, no
    extras (so no Spark, no CDK, no CLI), read from the lock without resolving or downloading."""
    result = _uv("export", "--frozen", "--offline", "--no-dev", "--no-emit-project", "--no-header",
                 "--no-annotate", "--format", "requirements-txt")
    if result.returncode != 0:
        raise BundleError(f"uv export of uv.lock failed:\n{result.stderr[-4000:]}")
    return result.stdout


def _hash_files(files: list[Path], *extra: str) -> str:
    digest = hashlib.sha256()
    for text in extra:
        digest.update(text.encode())
        digest.update(b"\0")
    for path in files:
        digest.update(str(path.relative_to(REPO)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _tree(root: Path) -> list[Path]:
    """The files of the package ``root`` that a function bundle ships (``FUNCTION_PACKAGES``)."""
    return [
        path for path in sorted(root.rglob("*"))
        if path.is_file() and path.relative_to(root).parts[0] in FUNCTION_PACKAGES
        and not set(path.relative_to(root).parts) & set(EXCLUDED_SOURCE) and path.suffix != ".pyc"
    ]


def dependencies_hash(requirements: str | None = None) -> str:
    """Changes when a locked runtime version or hash (``requirements``, default: the export of
    ``uv.lock``), the target platform or this bundler changes."""
    if requirements is None:
        requirements = runtime_requirements()
    return _hash_files([Path(__file__).resolve()], PLATFORM, PYTHON_VERSION, requirements)


def code_hash(name: str) -> str:
    """Hash of everything in function ``name``'s bundle: dependencies, package and handler."""
    files = [*_tree(REPO / "src" / "consolidator"), REPO / "functions" / name / "handler.py"]
    return _hash_files(files, dependencies_hash())


def _install_dependencies(target: Path, requirements: str, *, offline: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pinned = Path(tmp) / "requirements.txt"
        pinned.write_text(requirements)
        result = _uv(
            "pip", "install", "--quiet", "--no-config", "--target", str(target),
            "--python-platform", PLATFORM, "--python-version", PYTHON_VERSION,
            "--only-binary", ":all:", "--require-hashes", "--link-mode", "copy",
            *(["--offline"] if offline else []), "-r", str(pinned),
        )
    if result.returncode != 0:
        hint = ("\nThe wheels are fetched by the set-up: run `bash scripts/setup.sh test` "
                "(or `make setup`) once with network." if offline else "")
        raise BundleError(f"uv could not install the locked runtime dependencies:\n"
                          f"{result.stderr[-4000:]}{hint}")
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
    source = REPO / "src" / "consolidator"
    for path in _tree(source):
        destination = target / "consolidator" / path.relative_to(source)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, destination)


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


def dependencies(*, offline: bool = True) -> Path:
    """The runtime dependencies directory for the current lock (built on first use). Offline
    (the default) it installs only from uv's cache; ``offline=False`` is for the set-up."""
    requirements = runtime_requirements()
    return _cached_build(
        BUILD / f"_dependencies-{dependencies_hash(requirements)}",
        lambda staging: _install_dependencies(staging, requirements, offline=offline),
        "_dependencies-*",
    )


def function_bundle(name: str) -> Path:
    """The bundle directory of function ``name`` (built on first use, cached by content hash)."""
    handler = REPO / "functions" / name / "handler.py"
    if not handler.is_file():
        raise BundleError(f"functions/{name}/handler.py does not exist")
    directory = BUILD / f"{name}-{code_hash(name)}"
    if (directory / ".complete").exists():
        return directory
    installed = dependencies()

    def build(staging: Path) -> None:
        _link_tree(installed, staging)
        (staging / ".complete").unlink()
        _copy_package(staging)
        shutil.copy2(handler, staging / "handler.py")
        check_bundle(staging)

    return _cached_build(directory, build, f"{name}-*")  # older builds of this function


def directory_size(directory: Path) -> int:
    """Unzipped size in bytes (what counts against Lambda's 250 MB limit)."""
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def main(argv: list[str]) -> int:
    if "--fetch" in argv:  # set-up: download and install the locked wheels (network)
        argv = [arg for arg in argv if arg != "--fetch"]
        directory = dependencies(offline=False)
        print(f"dependencies\t{directory_size(directory) / 1e6:.1f} MB\t{directory.relative_to(REPO)}")
        if not argv:
            return 0
    names = argv or sorted(p.parent.name for p in (REPO / "functions").glob("*/handler.py"))
    for name in names:
        directory = function_bundle(name)
        print(f"{name}\t{directory_size(directory) / 1e6:.1f} MB\t{directory.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
