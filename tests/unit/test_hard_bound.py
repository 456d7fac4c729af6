"""The suite's hard bound per test: a teardown that hangs after its test failed (pytest-timeout
has stopped its timer by then) ends the run with its stack printed, instead of hanging it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HANGS = '''
import time
import pytest

@pytest.fixture
def resource():
    yield
    time.sleep(3600)  # a teardown that never returns

def test_fails_then_its_teardown_hangs(resource):
    assert False
'''


def test_a_teardown_hanging_after_a_failure_ends_the_run_with_its_stack(tmp_path: Path):
    (tmp_path / "test_hangs.py").write_text(HANGS)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "hard_bound", "-o", "timeout=2", "-q",
                           "-p", "no:cacheprovider", str(tmp_path / "test_hangs.py")],
                          check=False, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(Path(__file__).parents[1]), "TEST_HARD_BOUND_SECONDS": "4",
                               "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1, done
    assert time.monotonic() - started < 30
    assert "test_hangs.py::test_fails_then_its_teardown_hangs: still running after 4 s" in done.stderr
    assert 'in resource' in done.stderr, done.stderr  # the hanging frame, in the stack printed
