"""``python infra/sam_local.py`` reads its arguments as a command does: ``--help`` is help (not a
directory to look for templates in), a directory that is not there is named, an unknown option
is refused; exit 2 for a usage error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SAM_LOCAL = Path(__file__).resolve().parents[2] / "infra" / "sam_local.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SAM_LOCAL), *args], capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_is_help(flag):
    done = run(flag)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python infra/sam_local.py [-h] [CDK_OUT]")
    assert "serve --help" in done.stdout and "no synthesized templates" not in done.stdout + done.stderr


def test_serve_help_is_help():
    done = run("serve", "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: python infra/sam_local.py serve"), done.stderr


@pytest.mark.parametrize(("args", "said"), [
    (("nowhere",), "nowhere is not a directory: give the cloud assembly `make synth` wrote (cdk.out)"),
    (("-x",), "unrecognized arguments: -x"),
])
def test_usage_errors_name_what_was_wrong(args, said):
    done = run(*args)
    assert done.returncode == 2 and said in done.stderr, done.stderr
