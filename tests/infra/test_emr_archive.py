"""The EMR Serverless environment archive: what goes in (the lock's runtime and spark/cli extras,
no Spark, no dev/infra packages), the layout check every build runs, and (``make emr-check``) a
real ``spark-submit`` with an archive of the same layout built for this machine."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "infra"))

import emr_archive
from emr_archive import ArchiveError, check_archive

from consolidator.spark import emr

TARGET = {"python_version": "3.12", "architecture": "ARM64", "interpreter": "/usr/bin/python3.12"}
SITE = "lib/python3.12/site-packages/"
ELF_AARCH64 = b"\x7fELF\x02\x01\x01" + bytes(11) + (183).to_bytes(2, "little")
ELF_X86_64 = b"\x7fELF\x02\x01\x01" + bytes(11) + (62).to_bytes(2, "little")


def _archive(path: Path, *, link: str = "/usr/bin/python3.12", drop: str = "",
             extra: dict[str, bytes] | None = None, tag: str = "cp312-cp312-manylinux_2_17_aarch64") -> Path:
    """A small archive of the right layout (stub packages), altered as asked."""
    files = {"pyvenv.cfg": b"home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.12\n",
             SITE + "consolidator/cli/spark/commands.py": b"",
             SITE + "pyarrow/lib.so": ELF_AARCH64,
             SITE + "pyarrow-26.0.1.dist-info/WHEEL": f"Wheel-Version: 1.0\nTag: {tag}\n".encode(),
             SITE + "typer-0.29.2.dist-info/WHEEL": b"Wheel-Version: 1.0\nTag: py3-none-any\n"}
    files |= {SITE + f"{name}/__init__.py": b"" for name in emr_archive.REQUIRED}
    files |= extra or {}
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("bin/python")
        info.type, info.linkname = tarfile.SYMTYPE, link
        tar.addfile(info)
        for name, data in files.items():
            if drop and name.startswith(SITE + drop + "/"):
                continue
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_well_formed_archive_passes(tmp_path):
    summary = check_archive(_archive(tmp_path / "ok.tar.gz"), **TARGET)
    assert summary["distributions"] == ["pyarrow-26.0.1.dist-info", "typer-0.29.2.dist-info"]


@pytest.mark.parametrize(("change", "problem"), [
    ({"link": "/usr/bin/python3"}, "bin/python must be a symlink to /usr/bin/python3.12"),
    ({"drop": "pandas"}, "pandas is missing"),
    ({"drop": "consolidator"}, "consolidator is missing"),
    ({"extra": {SITE + "pyspark/__init__.py": b""}}, "pyspark must not be in the archive"),
    ({"extra": {SITE + "py4j-0.10.9.9.dist-info/WHEEL": b"Tag: py3-none-any\n"}}, "py4j must not be"),
    ({"extra": {SITE + "pytest/__init__.py": b""}}, "pytest must not be in the archive"),
    ({"extra": {SITE + "aws_cdk/__init__.py": b""}}, "aws_cdk must not be in the archive"),
    ({"tag": "cp311-cp311-manylinux_2_17_aarch64"}, "not Python 3.12 on aarch64"),
    ({"tag": "cp312-cp312-manylinux_2_17_x86_64"}, "not Python 3.12 on aarch64"),
    ({"extra": {SITE + "numpy/core.so": ELF_X86_64}}, "native library for another machine"),
])
def test_the_layout_check_names_what_is_wrong(tmp_path, change, problem):
    with pytest.raises(ArchiveError, match=re.escape(problem)):
        check_archive(_archive(tmp_path / "bad.tar.gz", **change), **TARGET)


@pytest.mark.parametrize(("tag", "fits"), [
    ("cp312-cp312-manylinux_2_17_aarch64.manylinux2014_aarch64", True),
    ("cp39-abi3-manylinux_2_28_aarch64", True),
    ("py3-none-any", True),
    ("py2.py3-none-any", True),
    ("cp313-abi3-manylinux_2_28_aarch64", False),
    ("cp312-cp312-musllinux_1_2_x86_64", False),
    ("cp312-cp312-macosx_11_0_arm64", False),
])
def test_wheel_tags_for_python_3_12_on_aarch64(tag, fits):
    assert any(emr_archive._tag_fits(t, "3.12", "aarch64") for t in _expand(tag)) is fits


def _expand(tag: str) -> list[str]:
    interpreters, abi, platforms = tag.split("-")
    return [f"{i}-{abi}-{p}" for i in interpreters.split(".") for p in platforms.split(".")]


def test_the_archive_takes_the_locked_runtime_and_spark_and_cli_extras_without_spark():
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^ ;\\]+)", emr_archive.requirements(), flags=re.MULTILINE))
    assert {"pandas", "pyarrow", "numpy", "protobuf", "matplotlib", "typer", "rich", "orjson",
            "confluent-kafka", "boto3"} <= set(pins)
    for absent in ("pyspark", "py4j", "pytest", "hypothesis", "moto", "ruff", "aws-cdk-lib", "cfn-lint"):
        assert absent not in pins, absent


def test_the_archive_target_is_the_construct_release():
    """One source of truth: the release, architecture, Python and wheel platform agree."""
    assert emr.RELEASE_LABEL == "emr-spark-8.0.0" and emr.SPARK_VERSION == "4.0.2"
    assert emr.PYTHON_VERSION == "3.12" and emr.INTERPRETER == "/usr/bin/python3.12"
    assert emr.WHEEL_PLATFORMS[emr.ARCHITECTURE].startswith(emr.MACHINES[emr.ARCHITECTURE] + "-manylinux_2_34")
    assert emr.archive_name() == "consolidator-emr-py3.12-aarch64.tar.gz"
    assert emr.KAFKA_PACKAGE.endswith(f"_{emr.SCALA_BINARY}:{emr.SPARK_VERSION}")


# --- make emr-check: a real spark-submit with an archive built for this machine ---------------

LOCAL = os.environ.get("CONSOLIDATOR_EMR_CHECK") == "1"


@pytest.mark.spark
@pytest.mark.skipif(not LOCAL, reason="make emr-check: builds a ~130 MB archive and runs spark-submit (minutes)")
def test_spark_submit_runs_a_replay_with_the_archive_python_on_the_executors(tmp_path):
    """``local-cluster`` executors are separate JVMs that unpack ``--archives`` into their working
    directory as on EMR, so ``./environment/bin/python`` is the archive's interpreter with only the
    archive's packages (the project's venv is not visible to it). The driver runs the archive
    unpacked by hand (EMR's driver gets it from ``spark.archives`` too); pyspark and py4j come from
    Spark's own python/lib, as on EMR."""
    import pyspark

    python_version, architecture, interpreter = emr_archive.local_target()
    archive = emr_archive.BUILD / "local" / emr.archive_name(python_version, architecture)
    assert archive.is_file(), f"{archive} missing: run `make emr-check`"
    check_archive(archive, python_version=python_version, architecture=architecture, interpreter=interpreter)
    driver = tmp_path / "driver"
    driver.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(driver, filter="tar")
    spark_home = tmp_path / "spark"  # the pip package's Spark, with its own work/ directory here
    spark_home.mkdir()
    for entry in Path(pyspark.__file__).parent.iterdir():
        (spark_home / entry.name).symlink_to(entry)
    records = tmp_path / "in.jsonl"
    records.write_text("".join(json.dumps({
        "topic": "t", "partition": 0, "offset": i, "timestamp": 1_795_000_020_000 + i * 1000,
        "value": json.dumps({"location_id": f"G{i % 2}", "order_id": f"o{i}", "items": []})}) + "\n"
        for i in range(6)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "PYTHON", "VIRTUAL_ENV"))}
    env |= {"SPARK_HOME": str(spark_home), "PYSPARK_DRIVER_PYTHON": str(driver / "bin" / "python"),
            "PYSPARK_PYTHON": emr.PYTHON}
    out = tmp_path / "out"
    result = subprocess.run(
        [str(spark_home / "bin" / "spark-submit"), "--master", "local-cluster[1,2,1024]",
         "--archives", f"{archive}#{emr.ENVIRONMENT}", "--conf", "spark.ui.enabled=false",
         str(emr_archive.BUILD / "local" / emr.ENTRY_POINT), "replay", "--input", str(records),
         "--out", str(out), "--event-ttl-seconds", "0"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert "d300s-h1800s-n500-t30s: 6 in, 2 batches" in result.stdout, result.stderr[-5000:]
    logs = "".join(p.read_text() for p in (spark_home / "work").rglob("stderr"))
    assert re.search(r"Unpacking an archive .*#environment .* to .*/\./environment", logs), logs[-3000:]
    assert json.loads((out / "report" / "report.json").read_text())["input"]["records"] == 6
