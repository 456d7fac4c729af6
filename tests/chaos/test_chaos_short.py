"""The short chaos profile (part of ``make test``): real process and server kills, zero violations,
on the Lambda path's handlers and on ``consolidator worker`` processes in a consumer group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.chaos
def test_short_chaos_profile_finds_no_violation():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, "-m", "chaos", "--profile", "short"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=600, check=False)
    print(result.stdout)
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["violations"] == 0, summary["scenarios"]
    assert summary["checkers_self_tested"] == summary["checkers"], "a checker did not flag its corruption"
    assert summary["faults_injected"] >= summary["runs"], "every run injected faults"
    assert "worker-kill" in summary["scenarios"], "the short profile runs a worker scenario"
    assert result.returncode == 0, result.stderr[-3000:]
