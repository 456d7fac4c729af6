"""Build the Spark job's Python environment archive for EMR Serverless, without Docker.

The archive is a virtualenv in the layout ``venv-pack`` writes, which is what AWS documents for
EMR Serverless (``spark.archives=<archive>#environment``, ``PYSPARK_PYTHON=./environment/bin/python``):

* ``bin/python`` is a symlink to the image's own interpreter (``/usr/bin/python3.12``), not a
  copy: ``venv-pack`` does not pack Python either. So nothing has to be built on Amazon Linux.
* ``pyvenv.cfg`` makes that interpreter use the archive's ``site-packages`` and not the image's.
* ``lib/python3.12/site-packages`` holds the runtime dependencies and the ``cli`` and ``spark``
  extras at the exact versions of ``uv.lock``, without pyspark and py4j (the release's Spark
  brings its own), installed the way ``infra/bundle.py`` installs the Lambda dependencies: ``uv
  export`` of the lock, then ``uv pip install --target --python-platform --python-version
  --only-binary :all: --require-hashes`` (manylinux wheels for the target machine, hashes
  checked, PyPI only); and the ``consolidator`` package from ``src/``.

:func:`check_archive` then reads the archive back and fails unless its layout is right: the
interpreter link and ``pyvenv.cfg``, the package and its dependencies present, every wheel and
every native library for the target Python and machine, no pyspark/py4j, no dev or infra package.

Usage: ``python infra/emr_archive.py`` (``make emr-archive``) builds ``build/emr/`` for the
release the construct deploys; ``--local`` builds the same layout for this machine (its Python,
its architecture), for a local ``spark-submit``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bundle import REPO, BundleError, _uv

from consolidator.spark import emr

BUILD = REPO / "build" / "emr"
EXTRAS = ("spark", "cli")
PROVIDED = ("pyspark", "py4j")  # the release's Spark: /usr/lib/spark/python
# Never in the archive: Spark itself, the dev extra (tests, linters), the infra extra (CDK).
FORBIDDEN = ("pyspark", "py4j", "pytest", "hypothesis", "moto", "ruff", "aws_cdk", "constructs",
             "jsii", "cdk_nag", "cfnlint")
# Imported by the jobs' Python (driver and workers): each must be in site-packages.
REQUIRED = ("consolidator", "pandas", "numpy", "pyarrow", "google/protobuf", "typer", "rich",
            "orjson", "msgspec", "pydantic", "confluent_kafka", "boto3", "pymysql", "matplotlib")
ELF_MACHINES = {"aarch64": 183, "x86_64": 62}  # e_machine of an ELF header


class ArchiveError(BundleError):
    """The archive could not be built, or is not what EMR Serverless needs."""


def requirements() -> str:
    """The locked runtime dependencies and the ``spark`` and ``cli`` extras, with hashes,
    minus pyspark and py4j; read from ``uv.lock`` without resolving."""
    result = _uv("export", "--frozen", "--offline", "--no-dev", *(f"--extra={e}" for e in EXTRAS),
                 "--no-emit-project", *(f"--no-emit-package={p}" for p in PROVIDED),
                 "--no-header", "--no-annotate", "--format", "requirements-txt")
    if result.returncode != 0:
        raise ArchiveError(f"uv export of uv.lock failed:\n{result.stderr[-4000:]}")
    return result.stdout


def _install(site: Path, python_version: str, wheel_platform: str, *, offline: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pinned = Path(tmp) / "requirements.txt"
        pinned.write_text(requirements())
        result = _uv("pip", "install", "--quiet", "--no-config", "--target", str(site),
                     "--python-platform", wheel_platform, "--python-version", python_version,
                     "--only-binary", ":all:", "--require-hashes", "--link-mode", "copy",
                     *(["--offline"] if offline else []), "-r", str(pinned))
    if result.returncode != 0:
        raise ArchiveError(f"uv could not install the locked dependencies for {wheel_platform}, "
                           f"Python {python_version}:\n{result.stderr[-4000:]}")
    shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts of the build machine
    (site / ".lock").unlink(missing_ok=True)  # uv's lock file for the target directory
    for cache in site.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)


def _skeleton(root: Path, python_version: str, interpreter: str) -> Path:
    """The venv around ``site-packages``: ``bin/python`` -> ``interpreter``, ``pyvenv.cfg``."""
    (root / "bin").mkdir(parents=True)
    os.symlink(interpreter, root / "bin" / "python")
    for alias in ("python3", f"python{python_version}"):
        os.symlink("python", root / "bin" / alias)
    (root / "pyvenv.cfg").write_text(
        f"home = {os.path.dirname(interpreter)}\ninclude-system-site-packages = false\n"
        f"version = {python_version}\n")
    site = root / "lib" / f"python{python_version}" / "site-packages"
    site.mkdir(parents=True)
    return site


def _tar(root: Path, archive: Path, compresslevel: int) -> None:
    """Members relative to the venv root, sorted, owned by root, fixed times (reproducible)."""
    def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = 0
        return info

    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, "w:gz", compresslevel=compresslevel) as tar:
        for path in sorted(root.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(root)), recursive=False, filter=normalise)
    partial.replace(archive)


def build(out: Path, *, python_version: str, architecture: str, interpreter: str,
          offline: bool = False, compresslevel: int = 6) -> tuple[Path, dict]:
    """Build ``out/<archive_name>`` and copy ``entry.py`` next to it; return the archive path and
    :func:`check_archive`'s summary. Raises :class:`ArchiveError` if uv fails or the check does."""
    wheel_platform = emr.WHEEL_PLATFORMS[architecture]
    out.mkdir(parents=True, exist_ok=True)
    archive = out / emr.archive_name(python_version, architecture)
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        root = Path(tmp) / emr.ENVIRONMENT
        site = _skeleton(root, python_version, interpreter)
        _install(site, python_version, wheel_platform, offline=offline)
        shutil.copytree(REPO / "src" / "consolidator", site / "consolidator",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        _tar(root, archive, compresslevel)
    shutil.copy2(REPO / "src" / "consolidator" / "cli" / "spark" / "entry.py", out / emr.ENTRY_POINT)
    return archive, check_archive(archive, python_version=python_version, architecture=architecture,
                                  interpreter=interpreter)


def _wheel_tags(text: str) -> list[str]:
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:")]


def _tag_fits(tag: str, python_version: str, machine: str) -> bool:
    """``cp312-cp312-manylinux_2_17_aarch64``, ``cp311-abi3-...``, ``py3-none-any`` and the like."""
    interpreter, abi, plat = tag.split("-")
    cp = "cp" + python_version.replace(".", "")
    if plat == "any":
        return abi == "none" and (interpreter.startswith("py3") or interpreter == cp)
    if not (plat.endswith("_" + machine) and ("linux" in plat)):
        return False
    if abi == "abi3":
        return interpreter.startswith("cp3") and int(interpreter[3:]) <= int(cp[3:])
    return interpreter == cp and abi in (cp, "none")


def check_archive(archive: Path, *, python_version: str, architecture: str, interpreter: str) -> dict:
    """Read ``archive`` back; raise :class:`ArchiveError` listing every problem, else return a
    summary (files, size, distributions)."""
    machine = emr.MACHINES[architecture]
    site = f"lib/python{python_version}/site-packages/"
    problems: list[str] = []
    dists: list[str] = []
    tops: set[str] = set()
    size = 0
    members: dict[str, tarfile.TarInfo] = {}
    cfg_text = ""
    with tarfile.open(archive, "r|gz") as tar:  # one streaming pass: no seeking in the gzip
        for member in tar:
            name = member.name
            members[name] = member
            if name.startswith("/") or ".." in Path(name).parts:
                problems.append(f"unsafe member {name}")
            if not member.isfile():
                continue
            size += member.size
            if name == "pyvenv.cfg":
                cfg_text = tar.extractfile(member).read().decode()
            if name.startswith(site):
                tops.add(name[len(site):].split("/")[0])
                if name.endswith("/WHEEL") and ".dist-info/" in name:
                    dist = name[len(site):].split("/")[0]
                    dists.append(dist)
                    tags = _wheel_tags(tar.extractfile(member).read().decode())
                    if not any(_tag_fits(t, python_version, machine) for t in tags):
                        problems.append(f"{dist} is for {', '.join(tags)}, not Python {python_version} on {machine}")
            if name.endswith(".so") or ".so." in name:
                header = tar.extractfile(member).read(20)
                if header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") != ELF_MACHINES[machine]:
                    problems.append(f"{name} is a native library for another machine than {machine}")
    python = members.get("bin/python")
    if python is None or not python.issym() or python.linkname != interpreter:
        problems.append(f"bin/python must be a symlink to {interpreter}, is "
                        f"{python.linkname if python is not None and python.issym() else python}")
    for line in (f"home = {os.path.dirname(interpreter)}", "include-system-site-packages = false"):
        if line not in cfg_text.splitlines():
            problems.append(f"pyvenv.cfg lacks {line!r}")
    for name in REQUIRED:
        if not any(n.startswith(site + name + "/") for n in members):
            problems.append(f"{name} is missing from {site}")
    if site + "consolidator/cli/spark/commands.py" not in members:
        problems.append("consolidator/cli/spark/commands.py is missing")
    for name in FORBIDDEN:
        if name in tops or any(t.lower().startswith(name.replace("_", "-") + "-") or t.startswith(name + "-")
                               for t in tops if t.endswith(".dist-info")):
            problems.append(f"{name} must not be in the archive")
    if problems:
        raise ArchiveError(f"{archive.name}:\n  " + "\n  ".join(problems))
    return {"files": len(members), "unpacked_bytes": size, "distributions": sorted(dists)}


def local_target() -> tuple[str, str, str]:
    """(Python version, architecture, interpreter) of this machine's Python: the one running
    this file (the project's venv), resolved to its base interpreter."""
    machine = platform.machine()
    architecture = {v: k for k, v in emr.MACHINES.items()}.get(machine)
    if architecture is None:
        raise ArchiveError(f"no manylinux target for this machine ({machine})")
    base = Path(sys.executable).resolve()
    return f"{sys.version_info.major}.{sys.version_info.minor}", architecture, str(base)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--local", action="store_true", help="this machine's Python and architecture")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--offline", action="store_true", help="install only from uv's cache")
    args = parser.parse_args(argv)
    if args.local:
        python_version, architecture, interpreter = local_target()
        out = args.out or BUILD / "local"
    else:
        python_version, architecture, interpreter = emr.PYTHON_VERSION, emr.ARCHITECTURE, emr.INTERPRETER
        out = args.out or BUILD
    try:
        archive, summary = build(out, python_version=python_version, architecture=architecture,
                                 interpreter=interpreter, offline=args.offline)
    except BundleError as error:
        print(f"emr-archive: {error}", file=sys.stderr)
        return 1
    rel = archive.relative_to(REPO) if archive.is_relative_to(REPO) else archive
    print(f"built {rel} ({archive.stat().st_size / 1e6:.0f} MB, {summary['unpacked_bytes'] / 1e6:.0f} MB "
          f"unpacked, {len(summary['distributions'])} distributions): Python {python_version} "
          f"({interpreter}) on {emr.MACHINES[architecture]}, layout checked")
    print(f"and {rel.parent / emr.ENTRY_POINT}")
    if not args.local:
        print(f"for {emr.RELEASE_LABEL} (Spark {emr.SPARK_VERSION}, {architecture}). Upload both to the "
              f"construct's bucket, then start the job:\n"
              f"  aws s3 cp {rel} s3://<bucket>/code/{archive.name}\n"
              f"  aws s3 cp {rel.parent / emr.ENTRY_POINT} s3://<bucket>/code/{emr.ENTRY_POINT}\n"
              f"  consolidator spark emr-submit --application-id <id> --execution-role-arn <job role> "
              f"--bucket <bucket> -- <stream options>")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
