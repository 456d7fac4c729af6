"""IaC security scan: checkov's CloudFormation checks on the synthesized templates, judged
against the accepted findings of ``infra/checkov-accepted.toml``.

    python infra/iac_scan.py [cdk.out]      # after a synth; exit 1 on a new or stale finding

checkov runs from its own environment, ``.tools/checkov`` (``scripts/setup.sh test`` installs it
from ``scripts/checkov-requirements.txt``, by hash), offline: no download, no update check.
A finding is (check id, construct path); the path is the resource's ``aws:cdk:path`` without the
stage and stack (``Functions/Ingest/Resource``), so it is the same in every environment.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHECKOV = REPO / ".tools" / "checkov" / "bin" / "checkov"
ACCEPTED = REPO / "infra" / "checkov-accepted.toml"
OFFLINE = {"BC_SKIP_MAPPING": "TRUE", "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true", "LOG_LEVEL": "ERROR"}


@dataclass(frozen=True, order=True)
class Finding:
    check: str
    path: str  # construct path inside the stack
    template: str  # file name
    title: str = ""

    def __str__(self) -> str:
        return f"{self.check} {self.path} ({self.template}): {self.title}"


@dataclass(frozen=True)
class Accepted:
    check: str
    resources: tuple[str, ...]
    reason: str

    def covers(self, finding: Finding) -> bool:
        return finding.check == self.check and any(fnmatch.fnmatchcase(finding.path, p) for p in self.resources)


def load_accepted(path: Path = ACCEPTED) -> list[Accepted]:
    """The accepted findings; each must have a check, resource patterns and a real reason."""
    entries = tomllib.loads(path.read_text())["accepted"]
    accepted = []
    for i, entry in enumerate(entries):
        reason = " ".join(entry.get("reason", "").split())
        if not entry.get("check") or not entry.get("resources") or len(reason) < 60:
            raise ValueError(f"{path.name}: entry {i + 1} ({entry.get('check')}) needs check, resources"
                             " and a reason of at least 60 characters")
        accepted.append(Accepted(entry["check"], tuple(entry["resources"]), reason))
    return accepted


def construct_paths(template: Path) -> dict[str, str]:
    """Logical id -> construct path inside the stack (``Stage/Stack/`` removed)."""
    resources = json.loads(template.read_text())["Resources"]
    return {key: "/".join(value.get("Metadata", {}).get("aws:cdk:path", f"?/?/{key}").split("/")[2:])
            for key, value in resources.items()}


def scan(templates: list[Path], checkov: Path = CHECKOV) -> list[Finding]:
    """Every failed check of every template (checkov offline, CloudFormation framework)."""
    if not checkov.exists():
        raise FileNotFoundError(f"{checkov} is missing: run `bash scripts/setup.sh test` (or `make setup`)")
    command = [str(checkov), "--framework", "cloudformation", "--skip-download", "--quiet", "--compact",
               "--output", "json"]
    for template in templates:
        command += ["--file", str(template)]
    done = subprocess.run(command, check=False, capture_output=True, text=True,
                          env={**os.environ, **OFFLINE}, timeout=600)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"checkov failed (exit {done.returncode}): {done.stderr[-2000:]}")
    reports = json.loads(done.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    paths = {t.name: construct_paths(t) for t in templates}
    findings = []
    for report in reports:
        if report.get("summary", {}).get("parsing_errors"):
            raise RuntimeError(f"checkov could not parse a template: {report['summary']}")
        for failed in report.get("results", {}).get("failed_checks", []):
            name = Path(failed["file_path"]).name
            logical_id = failed["resource"].split(".", 1)[1]
            findings.append(Finding(failed["check_id"], paths[name].get(logical_id, logical_id), name,
                                    failed["check_name"]))
    return sorted(findings)


def judge(findings: list[Finding], accepted: list[Accepted]) -> tuple[list[Finding], list[str]]:
    """(new findings: covered by no accepted entry; stale entries: check and pattern that cover no finding)."""
    new = [f for f in findings if not any(a.covers(f) for a in accepted)]
    stale = [f"{a.check} {pattern}" for a in accepted for pattern in a.resources
             if not any(f.check == a.check and fnmatch.fnmatchcase(f.path, pattern) for f in findings)]
    return new, stale


def templates_in(outdir: Path) -> list[Path]:
    return sorted(outdir.glob("assembly-*/*.template.json"))


def main(argv: list[str]) -> int:
    outdir = Path(argv[0]) if argv else REPO / "cdk.out"
    templates = templates_in(outdir)
    if not templates:
        print(f"no synthesized templates in {outdir}: run `make synth` first", file=sys.stderr)
        return 2
    findings = scan(templates)
    new, stale = judge(findings, load_accepted())
    for finding in new:
        print(f"NEW finding (fix it, or accept it with a reason in {ACCEPTED.name}): {finding}")
    for entry in stale:
        print(f"STALE acceptance (no such finding any more; remove it from {ACCEPTED.name}): {entry}")
    print(f"iac scan: {len(templates)} templates, {len(findings)} findings, {len(new)} new, {len(stale)} stale")
    return 1 if new or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
