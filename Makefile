# Two commands do all the set-up on a fresh Debian machine: `make demo` and `make test`.
PY := .venv/bin/python

.PHONY: setup test demo bench bench-ingest bench-flush bench-replay bench-acks capacity synth lint chaos

setup:
	@bash scripts/setup.sh

test: setup
	$(PY) -m pytest

demo: setup
	.venv/bin/consolidator demo

bench: bench-ingest bench-flush bench-replay bench-acks

bench-ingest: setup
	$(PY) bench/bench_ingest.py $(BENCH_ARGS)

bench-flush: setup
	$(PY) bench/bench_flush.py $(BENCH_ARGS)

bench-replay: setup
	$(PY) bench/bench_replay.py

# docs/capacity.md from the saved benchmark JSON lines (bench/results/, one file per run:
# `make bench-ingest BENCH_ARGS="--save bench/results/ingest-1.json"`); SERVER_CPU=thread
# when the database server was shared during the runs
SERVER_CPU ?= process
capacity: setup
	$(PY) bench/capacity.py --server-cpu $(SERVER_CPU) --ingest bench/results/ingest-*.json \
	  --flush bench/results/flush-*.json > docs/capacity.md

bench-acks: setup
	$(PY) bench/bench_acks.py

synth: setup
	$(PY) infra/bundle.py
	$(PY) infra/app.py
	.venv/bin/cfn-lint --ignore-checks W3005 -- cdk.out/assembly-*/*.template.json

lint: setup
	.venv/bin/ruff check src functions infra tests bench

# Fault injection (not part of `make test`, which runs its short profile): own MariaDB and Redis,
# real SIGKILLs, exact checkers; prints a summary table and one JSON line.
chaos: setup
	$(PY) -m chaos --profile full
