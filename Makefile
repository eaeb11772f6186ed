# The README's commands. `make test` is what CI runs (.ci/run).
PY ?= .venv/bin/python
# the checkout on the venv's path as a plain .pth line: setuptools' default editable
# finder is imported by every Python process of the venv (CONTRIBUTING.md, Benchmarks)
EDITABLE = --config-settings editable_mode=compat

.PHONY: install test test-fast bench lint demo

install:
	python3 -m venv .venv && $(PY) -m pip install -q -e '.[dev]' $(EDITABLE)
	$(PY) -m compileall -q tpuq  # an editable install compiles nothing: the CLI would recompile on every run

# three workers on CI's two cores: most tests wait on processes, not on the CPU
WORKERS ?= 3

test:
	$(PY) -m pytest -q -p no:cacheprovider -n $(WORKERS) --durations=15

# the unit and state tests: pure functions and the database, under 2 minutes (with the
# same workers: one at a time they wait on PostgreSQL and SQLite in turn, 2.5 times as long)
test-fast:
	$(PY) -m pytest -q -p no:cacheprovider -n $(WORKERS) tests/unit tests/state

bench:
	$(PY) bench/run.py

lint:
	$(PY) -m ruff check tpuq tests bench examples migrations
	$(PY) -m mypy tpuq

demo:
	examples/demo.sh
