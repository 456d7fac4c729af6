# Two commands do all the set-up on a fresh Debian machine: `make demo` and `make test`.
PY := .venv/bin/python

.PHONY: setup test demo bench bench-ingest bench-flush bench-replay bench-stream synth lint

setup:
	@bash scripts/setup.sh

test: setup
	$(PY) -m pytest

demo: setup
	.venv/bin/consolidator demo

bench: bench-ingest bench-flush bench-replay

bench-ingest: setup
	$(PY) bench/bench_ingest.py

bench-flush: setup
	$(PY) bench/bench_flush.py

bench-replay: setup
	$(PY) bench/bench_replay.py

bench-stream: setup
	$(PY) bench/bench_stream.py

synth: setup
	$(PY) infra/bundle.py
	$(PY) infra/app.py
	.venv/bin/cfn-lint --ignore-checks W3005 -- cdk.out/assembly-*/*.template.json

lint: setup
	.venv/bin/ruff check src functions infra tests bench
