# `make demo` runs the simulated window demo; `make test` runs the tests.
# Both create (or refresh) the local virtualenv .venv first, from a fresh clone.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tally-installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tally demo

lint: $(STAMP)
	$(PY) -m ruff check ledger runner cli migrations tests bench
	$(PY) -m mypy

test: lint
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) tally-demo .pytest_cache .mypy_cache .ruff_cache
