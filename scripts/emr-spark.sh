#!/usr/bin/env bash
# `make test-emr-spark`: the Spark tests on the Spark EMR Serverless runs (emr-spark-8.0.0: Spark
# 4.0.2), in a venv of their own (build/emr/spark-venv): pyspark 4.0.2 pinned by hash
# (scripts/emr-spark-requirements.txt), every other package at uv.lock's version with its hash,
# the project editable. The first run downloads from PyPI (~30 s); later runs reuse the venv.
# Arguments go to pytest (default: tests/spark).
set -euo pipefail
cd "$(dirname "$0")/.."
UV=.tools/venv/bin/uv
VENV=build/emr/spark-venv
export UV_PYTHON_DOWNLOADS=never UV_SYSTEM_CERTS=true
stamp="$VENV/.ready-$(cat scripts/emr-spark-requirements.txt uv.lock | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  rm -rf "$VENV"
  "$UV" venv -q --python .venv/bin/python "$VENV"
  "$UV" export --frozen --offline --no-dev --extra spark --extra cli --extra dev --no-emit-project \
    --no-emit-package pyspark --no-header --no-annotate --format requirements-txt > "$VENV/locked.txt"
  "$UV" pip install -q --python "$VENV/bin/python" --require-hashes \
    -r "$VENV/locked.txt" -r scripts/emr-spark-requirements.txt
  "$UV" pip install -q --python "$VENV/bin/python" --no-deps -e .
  touch "$stamp"
fi
"$VENV/bin/python" -c 'import pyspark; print(f"emr-spark: pyspark {pyspark.__version__}")'
[ $# -gt 0 ] || set -- tests/spark
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
