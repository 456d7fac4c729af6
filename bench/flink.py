"""Runs ``flink_session.py`` in Flink's own venv for the Spark benchmarks (project venv side)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FLINK_PYTHON = REPO / ".tools" / "flink" / "bin" / "python"


def flink_session_window(data: Path, warmup: Path, gap_ms: int, parallelism: int,
                         watermark_ms: int = 60_000) -> dict:
    """Flink's session window over the JSON-lines records in ``data`` after a warm-up on
    ``warmup``: seconds, cpu_seconds (the Flink process tree), sessions, events."""
    if not FLINK_PYTHON.exists():
        raise SystemExit("Flink is not installed: run `bash scripts/setup.sh flink` (the make bench targets do)")
    done = subprocess.run(
        [str(FLINK_PYTHON), str(Path(__file__).with_name("flink_session.py")), "--input", str(data),
         "--warmup", str(warmup), "--gap-ms", str(gap_ms), "--watermark-ms", str(watermark_ms),
         "--parallelism", str(parallelism)],
        capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(done.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"Flink's session window failed (exit {done.returncode}); its output is above")
    return json.loads(done.stdout.strip().splitlines()[-1])
