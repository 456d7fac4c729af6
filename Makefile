# Two commands do all the set-up on a fresh Debian 12 machine (only git and make needed):
# `make demo` (quick: the demo's needs only) and `make test` (everything, then ruff and pytest).
PY := .venv/bin/python
UV := .tools/venv/bin/uv
export UV_PYTHON_DOWNLOADS := never
export UV_SYSTEM_CERTS := true
# jsii prints a banner that Node.js 18 (Debian 12's) and 20 are past their end of life (the
# variable takes a list of major versions); CDK synthesizes fine on both, so it is silenced.
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 18,20
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
# The layering contracts of pyproject.toml ([tool.importlinter]); infra/ holds consolidator_infra
LINT_IMPORTS := PYTHONPATH=infra .venv/bin/lint-imports --no-logo

.PHONY: setup setup-demo setup-flink test demo docs bench bench-ingest bench-tracing bench-flush bench-flush-against bench-replay bench-stream bench-acks bench-worker capacity synth lint lock fresh-check container-check chaos emr-archive emr-check test-emr-spark

setup:
	@bash scripts/setup.sh test

setup-demo:
	@bash scripts/setup.sh demo

test: setup
	.venv/bin/ruff check src functions infra tests bench chaos
	$(LINT_IMPORTS)
	$(PY) -m pytest

demo: setup-demo
	.venv/bin/consolidator demo

# The pages written from the code: docs/reference/configuration.md from the settings' declarations,
# docs/reference/metrics.md from the list of metrics and deploy/grafana/consolidator.json from the
# panel list (a test fails when a committed one differs)
docs: setup
	.venv/bin/consolidator docs config
	.venv/bin/consolidator docs metrics
	.venv/bin/consolidator docs grafana

bench: bench-ingest bench-flush bench-replay bench-stream bench-acks bench-worker bench-tracing

bench-ingest: setup
	$(PY) bench/bench_ingest.py $(BENCH_ARGS)

# The ingest service with tracing off and on (bench/bench_tracing.py): on >= 0.95x off
bench-tracing: setup
	$(PY) bench/bench_tracing.py $(BENCH_ARGS)

bench-flush: setup
	$(PY) bench/bench_flush.py $(BENCH_ARGS)

# bench-flush of this checkout and of another git ref, alternated in one run (bench/against.py):
# `make bench-flush-against REF=3c6f210` (ROUNDS runs of each side; BENCH_ARGS go to both)
ROUNDS ?= 3
bench-flush-against: setup
	$(PY) bench/against.py --ref $(REF) --rounds $(ROUNDS) bench/bench_flush.py -- $(BENCH_ARGS)

# The worker against the ingest service fed directly, LOAD DATA, a backlog's memory, the latency
# of quiet groups (docs/guide/worker.md); a quick functional run:
# `make bench-worker BENCH_ARGS="--records 20000 --backlog 50000 --repeat 1"`
bench-worker: setup
	$(PY) bench/bench_worker.py $(BENCH_ARGS)

# Flink, the peer baseline of bench-replay and bench-stream, in its own venv (never in make test)
setup-flink:
	@bash scripts/setup.sh flink

bench-replay: setup setup-flink
	$(PY) bench/bench_replay.py $(BENCH_ARGS)

# docs/benchmarks/capacity.md from the saved benchmark JSON lines (bench/results/, one file per run:
# `make bench-ingest BENCH_ARGS="--save bench/results/ingest-1.json"`); SERVER_CPU=thread
# when the database server was shared during the runs
SERVER_CPU ?= process
capacity: setup
	$(PY) bench/capacity.py --server-cpu $(SERVER_CPU) --ingest bench/results/ingest-*.json \
	  --flush bench/results/flush-*.json --worker $(wildcard bench/results/worker-*.json) \
	  --stream $(wildcard bench/results/stream-*.json) > docs/benchmarks/capacity.md

bench-acks: setup
	$(PY) bench/bench_acks.py
bench-stream: setup setup-flink
	$(PY) bench/bench_stream.py $(BENCH_ARGS)

# EMR Serverless (none of it in `make test`; each downloads from PyPI, by hash, on first use):
# the job's Python environment archive for the construct's release (build/emr/), a real
# spark-submit with an archive of the same layout built for this machine, and the Spark tests
# on the release's Spark (4.0.2). See docs/guide/spark.md.
emr-archive: setup
	$(PY) infra/emr_archive.py
emr-check: setup
	$(PY) infra/emr_archive.py --local
	CONSOLIDATOR_EMR_CHECK=1 $(PY) -m pytest tests/infra/test_emr_archive.py -q
test-emr-spark: setup
	@bash scripts/emr-spark.sh

synth: setup
	$(PY) infra/bundle.py
	$(PY) infra/app.py
	.venv/bin/cfn-lint --ignore-checks W3005 -- cdk.out/assembly-*/*.template.json
	$(PY) infra/iac_scan.py cdk.out
	$(PY) infra/sam_local.py cdk.out

lint: setup
	.venv/bin/ruff check src functions infra tests bench chaos
	$(LINT_IMPORTS)

# Fault injection (not part of `make test`, which runs its short profile): own MariaDB and Redis,
# real SIGKILLs, exact checkers; prints a summary table and one JSON line.
chaos: setup
	$(PY) -m chaos --profile full
# Update every Python dependency to the newest versions pyproject.toml allows, in uv.lock.
lock:
	@bash scripts/setup.sh uv
	$(UV) lock --upgrade

# A fresh Debian 12 root (debootstrap) with only git and make: `make demo` with network, then
# `make demo` and `make test` with no network (loopback only). Needs root; ~15 min.
fresh-check:
	@bash scripts/fresh-check.sh

# The worker image (Containerfile) built with podman on a debootstrapped Debian 12 base, then run
# against the local MariaDB, Redis and a local Kafka: batches out, health check, clean SIGTERM.
# Needs root; minutes (the base and the image's layers are cached in build/container/).
container-check:
	@bash scripts/container-check.sh
