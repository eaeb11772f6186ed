# The README's commands. `make test` is what CI runs (.ci/run).
PY ?= .venv/bin/python

.PHONY: install test bench lint demo

install:
	python3 -m venv .venv && $(PY) -m pip install -q -e '.[dev]'
	$(PY) -m compileall -q tpuq  # an editable install compiles nothing: the CLI would recompile on every run

test:
	$(PY) -m pytest -q -p no:cacheprovider --durations=15

bench:
	$(PY) bench/run.py

lint:
	$(PY) -m ruff check tpuq tests bench examples
	$(PY) -m mypy tpuq

demo:
	examples/demo.sh
