# streambed: `make demo` and `make test` work from a fresh clone.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo lint typecheck unit integration bench docs system-deps clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Postgres 15 server binaries and Java 17: installed from Debian when missing.
system-deps:
	@bash scripts/system-deps.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check streambed tests bench cmd
	$(VENV)/bin/ruff format --check streambed tests bench cmd

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# Two test processes (pytest-xdist): the suite mostly waits (Spark starting, timeouts), so
# two share the 2-core machine well. A module's tests stay in one process (--dist loadfile,
# its module fixtures start once), in the order tests/conftest.py gives: the slowest modules
# first (--no-loadscope-reorder keeps it). The 30 slowest tests are printed at the end.
TEST_WORKERS ?= 2

test: $(STAMP) system-deps lint typecheck
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		--durations=30 tests

unit: $(STAMP)
	$(PY) -m pytest -q -m "not integration" tests

demo: $(STAMP) system-deps
	$(PY) cmd/demo.py

docs: $(STAMP)
	$(PY) -m streambed.core.config > docs/configuration.md
	$(PY) -m streambed.core.config --env > config/streambed.env

bench: $(STAMP) system-deps
	$(PY) bench/cdc_throughput.py

# Any benchmark by name, with its options: make bench-initial_load ARGS="--scales 10"
bench-%: $(STAMP) system-deps
	PYTHONPATH=. $(PY) bench/$*.py $(ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .demo .bench
